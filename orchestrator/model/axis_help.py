"""The longer help texts of the axis table (orchestrator/model/axes.py), and its interval parser, kept apart so that the
table stays short."""

CONNECTION_HELP = ("persistent (one connection for the run), reconnect (connect, publish --per-connection "
                   "readings, end, sleep until the next), resume-id or resume-ticket (the same with TLS 1.2 "
                   "session resumption by session ID or by ticket)")
ORDER_HELP = ("the order cells run in: blocked (cells that share a lab configuration - scenario, impairment, fleet "
              "size, transport, broker, repeat - run as one block; blocks and the cells within each in a seeded random "
              "order), random (every cell in a seeded random order) or as-listed (the lists' product, repeats "
              "outermost)")
DEVICE_STACK_HELP = ("the virtual device's TLS library, its image: mbedtls-2.28 (Arduino-ESP32 2.x, ESP-IDF 4.4; TLS "
                     "1.2) or mbedtls-3.6 (Arduino-ESP32 3.x, ESP-IDF 5; TLS 1.2 and 1.3)")
DEVICES_HELP = ("virtual devices publishing at once (a fleet: each its own id, seq and send log, and the run's "
                "--connection lifecycle with its own TLS session; see docs/fleet.md)")
SESSION_HELP = ("clean (no state kept between connections) or persistent (3.1.1 Clean Session 0 / MQTT 5 Clean "
                "Start 0 with --session-expiry-s: a lost connection is opened again and the unacknowledged QoS 1/2 "
                "messages are sent again with DUP)")
RECONNECT_HELP = ("what a device does when its connection is lost or refused: off (a persistent session reopens "
                  "every 200 ms, a clean session's run ends), immediate (at once, then every 200 ms while refused), "
                  "backoff (exponential with full jitter: attempt n waits uniform [0, min(cap, base x 2^n)), seeded "
                  "per device)")
EVENTS_HELP = ("events on the cell's timeline, from the publisher's go, comma-separated: broker-restart@20s (the "
               "broker process ended with SIGTERM and started again in its container), broker-kill@20s (SIGKILL), "
               "link-down@30s:5s (every device's link dropped both ways for 5 s, then restored)")
TRANSPORT_HELP = ("how MQTT is carried: tcp (MQTT on the TCP or TLS stream, port 1883 / 8883) or websocket (MQTT over "
                  "WebSocket, RFC 6455, subprotocol mqtt, on the same port: ws for plain scenarios, wss for TLS; one "
                  "binary frame per MQTT packet, no permessage-deflate; its cells run on the Mosquitto 2.0.21 broker, "
                  "built with libwebsockets)")
POWER_SAVE_HELP = ("the radio's power save while connected: none (always on, the board as before) or modem-sleep "
                   "(off between the access point's beacons, WIFI_PS_MIN_MODEM); a virtual device cannot emulate it")
SLEEP_MODE_HELP = ("what the device does between connections (not persistent): stay (awake, associated), light "
                   "(light sleep, RAM and association kept) or deep (deep sleep: everything but RTC memory lost, the "
                   "TLS session kept there for the next wake to resume; a virtual device emulates the forgetting)")
SLEEP_HELP = ("the device asleep between connections: from a connection's last reading to the next one's first, e.g. "
              "2s (0: one interval; a persistent connection never sleeps)")
ACK_TIMEOUT_HELP = ("how long the device waits for an acknowledgement before it counts the connection as lost (a "
                    "persistent session then reconnects and resends with DUP)")
FRESH_LAB_HELP = ("bring the whole lab up and down for every cell (the lab is otherwise kept up within a block: only "
                  "the broker process, the subscriber and the publisher are new per cell)")
BROKER_HELP = ("the broker program and build: auto (the transport's: mosquitto for tcp, mosquitto-2.0.21 for "
               "websocket), mosquitto (Debian 12's 2.0.11, OpenSSL 3.0), mosquitto-2.0.21 (Debian 13's, OpenSSL 3.5, "
               "libwebsockets) or rabbitmq (Debian 13's 4.0.5 with its MQTT plugin, TLS in Erlang/OTP's ssl: no QoS 2, "
               "TLS 1.2 resumed by session ID only; its image is built when a cell first needs it)")


def parse_interval(text: str) -> float:
    """'250ms', '0.5s', '250' (ms) -> milliseconds."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            return float(t[:-2])
        if t.endswith("s"):
            return float(t[:-1]) * 1000.0
        return float(t)
    except ValueError as exc:
        raise ValueError(f"invalid interval {text!r}: use e.g. 250ms or 0.5s") from exc
