#include "device_config.h"

namespace tb {

DeviceConfig::DeviceConfig(const opt::Values& v, uint8_t program_) : program(program_), values(v) {
#define TB_OPT_UINT(n, lo, hi, d) n = v.uint(opt::Id::n);
#define TB_OPT_MS(n, lo, hi, d) n = v.decimal(opt::Id::n);
#define TB_OPT_ENUM(n, c, d) n = v.text(opt::Id::n);
#define TB_OPT_TEXT(n, d) n = v.text(opt::Id::n);
#define TB_OPT_FLAG(n) n = v.uint(opt::Id::n) != 0;
#include "device_options.def"
#include "device_options_end.h"
}

}  // namespace tb
