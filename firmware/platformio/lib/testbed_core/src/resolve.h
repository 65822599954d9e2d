// Name resolution shared by the core's TCP transport and the host's UDP datagram (BSD sockets / lwIP).
#pragma once

#include <cstdint>

struct addrinfo;

namespace tb {

// One IPv4 address of host:port for sockets of `socktype` (SOCK_STREAM, SOCK_DGRAM): getaddrinfo's list,
// to be freed with freeaddrinfo; nullptr on failure with getaddrinfo's code in *rc.
addrinfo* resolve_ipv4(const char* host, uint16_t port, int socktype, int* rc);

}  // namespace tb
