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

}  // namespace tb
