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
    "conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error,"
    "hello_sent_ms,flight_in_ms,verified_ms,kex_done_ms,finished_sent_ms,device_busy_ms";

void format_connection_row(const tb::ConnectionStats& c, char* out, size_t cap) {
  char tcp[24], tls[24], connack[24];
  ms_field(c.tcp_connect_us, tcp, sizeof(tcp));
  ms_field(c.handshake_us, tls, sizeof(tls));
  ms_field(c.connack_us, connack, sizeof(connack));
  const char* resumed = c.resumed == 1 ? "1" : c.resumed == 0 ? "0" : "";
  int n = snprintf(out, cap, "%" PRIu32 ",%" PRId64 ",%s,%s,%s,%s,%" PRIu32 ",%s,%s", c.index, c.t_open_us, tcp,
                   tls, connack, resumed, c.messages, tb::close_mode_name(c.close),
                   c.error == tb::Err::Ok ? "" : tb::err_name(c.error));
  if (n > 0 && static_cast<size_t>(n) < cap) format_phases(c.phases, out + n, cap - static_cast<size_t>(n));
}

void format_phases(const tb::HandshakePhases& p, char* out, size_t cap) {
  const int64_t us[] = {p.hello_sent_us, p.flight_in_us, p.verified_us, p.kex_done_us, p.finished_sent_us,
                        p.busy_us};
  size_t at = 0;
  for (int64_t v : us) {
    char ms[24];
    ms_field(v, ms, sizeof(ms));
    int n = snprintf(out + at, cap - at, ",%s", ms);
    if (n < 0 || static_cast<size_t>(n) >= cap - at) return;
    at += static_cast<size_t>(n);
  }
}

}  // namespace vdev
