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
  TlsHostname,       // the broker certificate's DNS names do not match the server name
  TlsCertVerify,     // the broker certificate failed verification for a reason not named below
  TlsCertUntrusted,  // the broker certificate does not chain to the CA the device was given
  TlsCertExpired,    // the broker certificate's validity has ended
  TlsCertNotYetValid,  // its validity starts in the future (on a board: is the clock set?)
  TlsNoSharedCipher,
  TlsAlert,
  TlsVersion,        // the broker does not run TLS 1.2 (it chose or answered in an older version, or refused 1.2)
  TlsHandshake,
  TlsWrite,
  TlsRead,
  ConnackRefused,
  AckMismatch,
  SensorRead,
  SendLog,
  Keylog,
  Interrupted,
  TimeSyncNoReply,  // time_sync: no exchange with the time-echo service got a valid reply
  UnknownCommand,   // board protocol: a host line that is no command
  LineTooLong,      // board protocol: a host line longer than kMaxHostLine
  OutOfSequence,    // board protocol: RUN CHUNK/END without RUN BEGIN
  BodyTooLarge,     // board protocol: RUN body over kMaxBody or over its announced length
  ChunkMissing,     // board protocol: a chunk index skipped
  ChunkDuplicate,   // board protocol: a chunk index repeated
  LengthMismatch,   // board protocol: RUN END before len bytes arrived
  CrcMismatch,      // board protocol: the body's CRC-32 is not the announced one
  BadEncoding,      // board protocol: bad base64, escape or body line
  UnknownKey,       // board protocol: a RUN key this version does not know
  MissingKey,       // board protocol: a required RUN key absent
  DuplicateKey,     // board protocol: a RUN key given twice
  UnsupportedMode,  // board protocol: a connection mode this version does not know
  TransferTimeout,  // board protocol: no RUN line within kTransferTimeoutMs
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
