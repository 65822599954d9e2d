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
