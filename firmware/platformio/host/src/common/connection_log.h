// The connections log (--connections-log) of vdevice and the fleet: one CSV row per connection of the run
// (the fleet writes its device id first: device,conn,...).
//   conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error
// conn = ConnectionStats::index (0, 1, ...), t_open_us wall clock (us since the epoch) just before the
// connect, the three times in ms with 3 decimals (empty: not measured - plain TCP's handshake, or not
// reached), resumed 1|0 (TLS, the client's claim) or empty (plain TCP, no completed handshake),
// close disconnect|drop, error the tb::Err name of a failed connection (empty when it ended as planned).
#pragma once

#include <cstddef>

#include "publisher.h"

namespace vdev {

extern const char kConnectionsLogHeader[];

// The row of one connection (no newline); truncated to cap.
void format_connection_row(const tb::ConnectionStats& c, char* out, size_t cap);

}  // namespace vdev
