#include "tb_error.h"

#include <cstdarg>
#include <cstdio>

namespace tb {

const char* err_name(Err e) {
  switch (e) {
    case Err::Ok: return "Ok";
    case Err::InvalidArgument: return "InvalidArgument";
    case Err::BufferTooSmall: return "BufferTooSmall";
    case Err::NeedMore: return "NeedMore";
    case Err::Malformed: return "Malformed";
    case Err::Protocol: return "Protocol";
    case Err::PayloadTooSmall: return "PayloadTooSmall";
    case Err::PayloadTooLarge: return "PayloadTooLarge";
    case Err::UnknownCipher: return "UnknownCipher";
    case Err::CipherNotCompiled: return "CipherNotCompiled";
    case Err::Dns: return "Dns";
    case Err::Socket: return "Socket";
    case Err::ConnectRefused: return "ConnectRefused";
    case Err::ConnectTimeout: return "ConnectTimeout";
    case Err::Connect: return "Connect";
    case Err::Send: return "Send";
    case Err::Recv: return "Recv";
    case Err::RecvTimeout: return "RecvTimeout";
    case Err::PeerClosed: return "PeerClosed";
    case Err::NotConnected: return "NotConnected";
    case Err::TlsSetup: return "TlsSetup";
    case Err::TlsRng: return "TlsRng";
    case Err::TlsCaParse: return "TlsCaParse";
    case Err::TlsCertParse: return "TlsCertParse";
    case Err::TlsKeyParse: return "TlsKeyParse";
    case Err::TlsHostname: return "TlsHostname";
    case Err::TlsCertVerify: return "TlsCertVerify";
    case Err::TlsCertUntrusted: return "TlsCertUntrusted";
    case Err::TlsCertExpired: return "TlsCertExpired";
    case Err::TlsCertNotYetValid: return "TlsCertNotYetValid";
    case Err::TlsNoSharedCipher: return "TlsNoSharedCipher";
    case Err::TlsAlert: return "TlsAlert";
    case Err::TlsVersion: return "TlsVersion";
    case Err::TlsHandshake: return "TlsHandshake";
    case Err::TlsWrite: return "TlsWrite";
    case Err::TlsRead: return "TlsRead";
    case Err::ConnackRefused: return "ConnackRefused";
    case Err::AckMismatch: return "AckMismatch";
    case Err::SensorRead: return "SensorRead";
    case Err::SendLog: return "SendLog";
    case Err::Keylog: return "Keylog";
    case Err::Interrupted: return "Interrupted";
    case Err::TimeSyncNoReply: return "TimeSyncNoReply";
    case Err::UnknownCommand: return "UnknownCommand";
    case Err::LineTooLong: return "LineTooLong";
    case Err::OutOfSequence: return "OutOfSequence";
    case Err::BodyTooLarge: return "BodyTooLarge";
    case Err::ChunkMissing: return "ChunkMissing";
    case Err::ChunkDuplicate: return "ChunkDuplicate";
    case Err::LengthMismatch: return "LengthMismatch";
    case Err::CrcMismatch: return "CrcMismatch";
    case Err::BadEncoding: return "BadEncoding";
    case Err::UnknownKey: return "UnknownKey";
    case Err::MissingKey: return "MissingKey";
    case Err::DuplicateKey: return "DuplicateKey";
    case Err::UnsupportedMode: return "UnsupportedMode";
    case Err::TransferTimeout: return "TransferTimeout";
  }
  return "Unknown";
}

void ErrorText::set(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf_, kCapacity, fmt, ap);
  va_end(ap);
}

}  // namespace tb
