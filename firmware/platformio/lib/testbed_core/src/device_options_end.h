// Ends one use of the option table: `#include "device_options.def"` with the user's TB_OPT_* entry macros defined,
// then `#include "device_options_end.h"`, which undefines them and the .def's TB_PROGRAMS. No include guard on
// purpose: every use of the table ends with it.
#undef TB_OPT_UINT
#undef TB_OPT_MS
#undef TB_OPT_ENUM
#undef TB_OPT_TEXT
#undef TB_OPT_FLAG
#undef TB_PROGRAMS
