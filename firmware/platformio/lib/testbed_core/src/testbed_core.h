// Umbrella header of the portable core (no Arduino or ESP-IDF includes).
#pragma once

#include "cipher_suites.h"
#include "clock.h"
#include "connection_mode.h"
#include "sleep_mode.h"
#include "device_config.h"
#include "mq2.h"
#include "mqtt_codec.h"
#include "payload.h"
#include "plain_tcp.h"
#include "publisher.h"
#include "tb_error.h"
#include "time_sync.h"
#include "tls_transport.h"
#include "transport.h"
#include "websocket.h"
