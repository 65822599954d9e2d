// The connections log (--connections-log) of vdevice and the fleet: one CSV row per connection of the run
// (the fleet writes its device id first: device,conn,...).
//   conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error,
//   hello_sent_ms,flight_in_ms,verified_ms,kex_done_ms,finished_sent_ms,device_busy_ms
// conn = ConnectionStats::index (0, 1, ...), t_open_us wall clock (us since the epoch) just before the
// connect, the three times in ms with 3 decimals (empty: not measured - plain TCP's handshake, or not
// reached), resumed 1|0 (TLS, the client's claim) or empty (plain TCP, no completed handshake),
// close disconnect|drop, error the tb::Err name of a failed connection (empty when it ended as planned).
// Then the device's own TLS handshake phases (tb::HandshakePhases, appended so that older readers still work): ms
// since its handshake began on its monotonic clock, empty where not reached (plain TCP; a resumed handshake has no
// certificate to verify), and device_busy_ms: TCP connected -> CONNECT written, less its waits for the broker.
#pragma once

#include <cstddef>

#include "publisher.h"

namespace vdev {

extern const char kConnectionsLogHeader[];

// The row of one connection (no newline); truncated to cap.
void format_connection_row(const tb::ConnectionStats& c, char* out, size_t cap);

// ",hello_sent_ms,...,device_busy_ms" of one connection (the row's last six fields); truncated to cap.
void format_phases(const tb::HandshakePhases& p, char* out, size_t cap);

}  // namespace vdev
