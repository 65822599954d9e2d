#include "connection_log.h"

#include <cinttypes>
#include <cstdio>

namespace vdev {
namespace {

// Microseconds as milliseconds with three decimals; empty when not measured (negative).
void ms_field(int64_t us, char* out, size_t cap) {
  if (us < 0) {
    out[0] = '\0';
    return;
  }
  snprintf(out, cap, "%" PRId64 ".%03" PRId64, us / 1000, us % 1000);
}

}  // namespace

const char kConnectionsLogHeader[] =
    "conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error";

void format_connection_row(const tb::ConnectionStats& c, char* out, size_t cap) {
  char tcp[24], tls[24], connack[24];
  ms_field(c.tcp_connect_us, tcp, sizeof(tcp));
  ms_field(c.handshake_us, tls, sizeof(tls));
  ms_field(c.connack_us, connack, sizeof(connack));
  const char* resumed = c.resumed == 1 ? "1" : c.resumed == 0 ? "0" : "";
  snprintf(out, cap, "%" PRIu32 ",%" PRId64 ",%s,%s,%s,%s,%" PRIu32 ",%s,%s", c.index, c.t_open_us, tcp, tls,
           connack, resumed, c.messages, tb::close_mode_name(c.close),
           c.error == tb::Err::Ok ? "" : tb::err_name(c.error));
}

}  // namespace vdev
