// Named error codes of the portable core and a fixed-size error text buffer.
#pragma once

#include <cstddef>

namespace tb {

enum class Err : int {
  Ok = 0,
  InvalidArgument,
  BufferTooSmall,
  NeedMore,
  Malformed,
  Protocol,
  PayloadTooSmall,
  PayloadTooLarge,
  UnknownCipher,
  CipherNotCompiled,
  Dns,
  Socket,
  ConnectRefused,
  ConnectTimeout,
  Connect,
  Send,
  Recv,
  RecvTimeout,
  PeerClosed,
  NotConnected,
  TlsSetup,
  TlsRng,
  TlsCaParse,
  TlsCertParse,
  TlsKeyParse,
  TlsHostname,
  TlsCertVerify,
  TlsNoSharedCipher,
  TlsAlert,
  TlsVersion,
  TlsHandshake,
  TlsWrite,
  TlsRead,
  ConnackRefused,
  AckMismatch,
  SensorRead,
  SendLog,
  Keylog,
  Interrupted,
};

// Stable name of an error code, e.g. "TlsNoSharedCipher".
const char* err_name(Err e);

// A fixed-size, always NUL-terminated error message.
class ErrorText {
 public:
  static constexpr size_t kCapacity = 320;
  void set(const char* fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;
  void clear() { buf_[0] = '\0'; }
  const char* c_str() const { return buf_; }
  bool empty() const { return buf_[0] == '\0'; }

 private:
  char buf_[kCapacity] = {0};
};

}  // namespace tb
