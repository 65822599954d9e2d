#include "connection_mode.h"

#include <cstring>

namespace tb {

const char* connection_mode_name(ConnectionMode m) {
  switch (m) {
    case ConnectionMode::Persistent: return "persistent";
    case ConnectionMode::Reconnect: return "reconnect";
    case ConnectionMode::ResumeId: return "resume-id";
    case ConnectionMode::ResumeTicket: return "resume-ticket";
  }
  return "?";
}

const char* close_mode_name(CloseMode c) {
  switch (c) {
    case CloseMode::Disconnect: return "disconnect";
    case CloseMode::Drop: return "drop";
  }
  return "?";
}

bool parse_connection_mode(const char* name, ConnectionMode* out) {
  static const ConnectionMode kAll[] = {ConnectionMode::Persistent, ConnectionMode::Reconnect,
                                        ConnectionMode::ResumeId, ConnectionMode::ResumeTicket};
  if (name == nullptr) return false;
  for (ConnectionMode m : kAll) {
    if (strcmp(name, connection_mode_name(m)) == 0) {
      *out = m;
      return true;
    }
  }
  return false;
}

bool parse_close_mode(const char* name, CloseMode* out) {
  if (name == nullptr) return false;
  if (strcmp(name, close_mode_name(CloseMode::Disconnect)) == 0) {
    *out = CloseMode::Disconnect;
  } else if (strcmp(name, close_mode_name(CloseMode::Drop)) == 0) {
    *out = CloseMode::Drop;
  } else {
    return false;
  }
  return true;
}

SessionResumption resumption_for(ConnectionMode m) {
  switch (m) {
    case ConnectionMode::ResumeId: return SessionResumption::SessionId;
    case ConnectionMode::ResumeTicket: return SessionResumption::Ticket;
    case ConnectionMode::Persistent:
    case ConnectionMode::Reconnect: return SessionResumption::None;
  }
  return SessionResumption::None;
}

const char* reconnect_policy_name(ReconnectPolicy p) {
  switch (p) {
    case ReconnectPolicy::Off: return "off";
    case ReconnectPolicy::Immediate: return "immediate";
    case ReconnectPolicy::Backoff: return "backoff";
  }
  return "?";
}

bool parse_reconnect_policy(const char* name, ReconnectPolicy* out) {
  static const ReconnectPolicy kAll[] = {ReconnectPolicy::Off, ReconnectPolicy::Immediate, ReconnectPolicy::Backoff};
  if (name == nullptr) return false;
  for (ReconnectPolicy p : kAll) {
    if (strcmp(name, reconnect_policy_name(p)) == 0) {
      *out = p;
      return true;
    }
  }
  return false;
}

uint64_t reconnect_pause_us(ReconnectPolicy p, uint32_t base_ms, uint32_t cap_ms, uint32_t attempt, uint64_t* rng) {
  constexpr uint64_t kRetryUs = 200000;  // the core's pause between refused attempts (Off: every attempt)
  if (p == ReconnectPolicy::Off) return kRetryUs;
  if (p == ReconnectPolicy::Immediate) return attempt == 0 ? 0 : kRetryUs;
  uint64_t ceiling = static_cast<uint64_t>(base_ms) * 1000;
  for (uint32_t i = 0; i < attempt && ceiling < static_cast<uint64_t>(cap_ms) * 1000; ++i) ceiling *= 2;
  if (ceiling > static_cast<uint64_t>(cap_ms) * 1000) ceiling = static_cast<uint64_t>(cap_ms) * 1000;
  uint64_t x = (*rng += 0x9E3779B97F4A7C15ULL);  // splitmix64
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return ceiling == 0 ? 0 : x % ceiling;
}

int64_t scheduled_offset_us(ConnectionMode m, uint32_t per_connection, uint64_t interval_us, uint64_t sleep_us,
                            uint32_t seq) {
  if (m == ConnectionMode::Persistent || sleep_us == 0 || per_connection == 0) {
    return static_cast<int64_t>(seq * interval_us);
  }
  const uint64_t c = seq / per_connection;
  const uint64_t r = seq % per_connection;
  return static_cast<int64_t>(c * ((per_connection - 1) * interval_us + sleep_us) + r * interval_us);
}

}  // namespace tb
