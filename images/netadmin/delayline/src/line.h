/* The delay line on an NFQUEUE (line.c). */
#ifndef DELAYLINE_LINE_H
#define DELAYLINE_LINE_H

#include <stdint.h>

#include "config.h"
#include "model.h"

int64_t dl_now_ns(void); /* CLOCK_MONOTONIC */

/* binds the queue and runs until SIGTERM/SIGINT/SIGHUP; 0 after an orderly end, 1 on a failure */
int dl_line_run(dl_config *c, const dl_table *table);

#endif
