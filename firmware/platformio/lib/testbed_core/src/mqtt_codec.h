// MQTT 3.1.1 and 5 packet encoding and decoding into caller-provided fixed buffers.
// Encoders refuse what the specification forbids; decoders refuse malformed input.
// MQTT 5 and QoS 2 (CONNECT/CONNACK properties, topic alias, the acknowledgements with reason codes):
// mqtt5_codec.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tb_error.h"

namespace tb {
namespace mqtt {

enum PacketType : uint8_t {
  kConnect = 1,
  kConnack = 2,
  kPublish = 3,
  kPuback = 4,
  kPubrec = 5,
  kPubrel = 6,
  kPubcomp = 7,
  kSubscribe = 8,
  kSuback = 9,
  kUnsubscribe = 10,
  kUnsuback = 11,
  kPingreq = 12,
  kPingresp = 13,
  kDisconnect = 14,
};

constexpr uint8_t kLevel311 = 4;  // the CONNECT's protocol level: MQTT 3.1.1
constexpr uint8_t kLevel5 = 5;    // MQTT 5.0

constexpr uint32_t kMaxRemainingLength = 268435455;  // 0xFF 0xFF 0xFF 0x7F (spec 2.2.3)

// Writes the variable-length Remaining Length into out (at least 4 bytes).
// Returns the number of bytes written (1..4), or 0 when value exceeds kMaxRemainingLength.
size_t encode_remaining_length(uint32_t value, uint8_t* out);

// Decodes a Remaining Length. Err::NeedMore when input ends inside the field;
// Err::Malformed when a fifth byte would be needed.
Err decode_remaining_length(const uint8_t* in, size_t len, uint32_t* value, size_t* used);

// True when [s, s+len) is well-formed UTF-8 without U+0000 and surrogates (spec 1.5.3).
bool valid_utf8_string(const uint8_t* s, size_t len);

struct ConnectOptions {
  const char* client_id = "";      // may be empty only with clean_session
  const char* username = nullptr;  // optional
  const char* password = nullptr;  // optional; requires username in 3.1.1
  uint16_t keepalive_s = 60;
  bool clean_session = true;       // 3.1.1 Clean Session; MQTT 5 Clean Start
  uint8_t level = kLevel311;       // kLevel311 or kLevel5
  uint32_t session_expiry_s = 0;   // MQTT 5: the Session Expiry Interval property, sent when non-zero
};

Err encode_connect(const ConnectOptions& opt, uint8_t* out, size_t cap, size_t* out_len);

// PUBLISH; qos 0, 1 or 2 (packet_id must be non-zero for qos 1 and 2 and is absent for qos 0).
// MQTT 3.1.1 (no properties).
Err encode_publish(const char* topic, const uint8_t* payload, size_t payload_len, uint8_t qos,
                   uint16_t packet_id, bool retain, bool dup, uint8_t* out, size_t cap, size_t* out_len);

struct PublishOptions {
  uint8_t level = kLevel311;
  uint8_t qos = 0;
  uint16_t packet_id = 0;
  bool retain = false;
  bool dup = false;
  uint16_t topic_alias = 0;  // MQTT 5: the Topic Alias property when non-zero; then topic may be ""
};
// PUBLISH of either version (MQTT 5: a property length, and the Topic Alias when set).
Err encode_publish(const char* topic, const uint8_t* payload, size_t payload_len, const PublishOptions& o,
                   uint8_t* out, size_t cap, size_t* out_len);

// PUBACK, PUBREC, PUBREL (flags 0010) or PUBCOMP. MQTT 5: the reason code follows the packet id unless
// it is 0 (Success), which is then left out (3.4.2.1).
Err encode_ack(uint8_t type, uint16_t packet_id, uint8_t level, uint8_t reason, uint8_t* out, size_t cap,
               size_t* out_len);

struct AckView {
  uint8_t type = 0;  // kPuback, kPubrec, kPubrel or kPubcomp
  uint16_t packet_id = 0;
  uint8_t reason = 0;  // MQTT 5 reason code (0 when absent, always 0 in 3.1.1); >= 0x80 is a failure
};
// One whole PUBACK/PUBREC/PUBREL/PUBCOMP of the given protocol level (MQTT 5: reason code and
// properties optional, the properties skipped).
Err decode_ack(const uint8_t* in, size_t len, uint8_t level, AckView* out);

struct ConnackView {
  bool session_present = false;
  uint8_t code = 0;                  // 3.1.1 return code 0..5, or the MQTT 5 reason code
  uint16_t receive_maximum = 65535;  // MQTT 5 property 0x21 (absent: 65535)
  uint16_t topic_alias_maximum = 0;  // MQTT 5 property 0x22 (absent: 0, no alias allowed)
  uint8_t maximum_qos = 2;           // MQTT 5 property 0x24 (absent: 2)
  bool has_session_expiry = false;   // MQTT 5 property 0x11: the broker's session expiry for us
  uint32_t session_expiry_s = 0;
  const char* reason_string = nullptr;  // MQTT 5 property 0x1F, not NUL-terminated
  uint16_t reason_string_len = 0;
};
Err decode_connack(const uint8_t* in, size_t len, uint8_t level, ConnackView* out);

// MQTT 5 DISCONNECT (from the broker): its reason code (0 when absent) and reason string.
Err decode_disconnect5(const uint8_t* in, size_t len, uint8_t* reason, const char** text, uint16_t* text_len);

// MQTT 5 reason code names (spec 2.4), e.g. 0x94 "Topic Alias invalid".
const char* reason_name(uint8_t code);

Err encode_puback(uint16_t packet_id, uint8_t* out, size_t cap, size_t* out_len);
Err encode_pingreq(uint8_t* out, size_t cap, size_t* out_len);
Err encode_pingresp(uint8_t* out, size_t cap, size_t* out_len);
Err encode_disconnect(uint8_t* out, size_t cap, size_t* out_len);
Err encode_connack(bool session_present, uint8_t return_code, uint8_t* out, size_t cap, size_t* out_len);

struct FixedHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t remaining = 0;
  size_t header_len = 0;  // 1 + bytes of the Remaining Length field
};

// Decodes the fixed header and checks the reserved flag bits of the packet type (spec 2.2.2).
Err decode_fixed_header(const uint8_t* in, size_t len, FixedHeader* h);

// The decoders below take exactly one complete packet: len must equal header + remaining.
Err decode_connack(const uint8_t* in, size_t len, bool* session_present, uint8_t* return_code);
Err decode_puback(const uint8_t* in, size_t len, uint16_t* packet_id);
Err decode_pingresp(const uint8_t* in, size_t len);
Err decode_pingreq(const uint8_t* in, size_t len);
Err decode_disconnect(const uint8_t* in, size_t len);

struct PublishView {
  const char* topic = nullptr;  // not NUL-terminated
  uint16_t topic_len = 0;
  uint8_t qos = 0;
  bool retain = false;
  bool dup = false;
  uint16_t packet_id = 0;
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
};
Err decode_publish(const uint8_t* in, size_t len, PublishView* out);

struct ConnectView {
  const char* client_id = nullptr;
  uint16_t client_id_len = 0;
  const char* username = nullptr;
  uint16_t username_len = 0;
  const uint8_t* password = nullptr;
  uint16_t password_len = 0;
  uint16_t keepalive_s = 0;
  bool clean_session = false;
  bool has_username = false;
  bool has_password = false;
};
// Decodes a CONNECT without will (protocol name "MQTT", level 4).
Err decode_connect(const uint8_t* in, size_t len, ConnectView* out);

// Text for a CONNACK return code (spec table 3.1).
const char* connack_reason(uint8_t return_code);

}  // namespace mqtt
}  // namespace tb
