#include "resolve.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

namespace tb {

addrinfo* resolve_ipv4(const char* host, uint16_t port, int socktype, int* rc) {
  addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = socktype;
  char port_str[8];
  snprintf(port_str, sizeof(port_str), "%u", static_cast<unsigned>(port));
  addrinfo* res = nullptr;
  *rc = getaddrinfo(host, port_str, &hints, &res);
  if (*rc != 0 || res == nullptr) {
    if (res != nullptr) freeaddrinfo(res);
    return nullptr;
  }
  return res;
}

}  // namespace tb
