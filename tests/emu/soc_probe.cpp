// Compile-time SoC selection check (built with -fsyntax-only): -DASCENDC_EMU_SOC=<name> picks the
// soc_profiles.def row; -DEXPECT_UB_BYTES / -DEXPECT_MAX_LIVE state what that row must hold. An
// unknown name fails the emulator's own static_assert.
#include "ascendc_emu/types.h"

namespace emu = AscendC::emu;
constexpr const emu::SocProfile& kSoc = emu::kSocTable[emu::SocIndex(emu::kDefaultSocName)];

#ifdef EXPECT_UB_BYTES
static_assert(kSoc.ub_bytes == EXPECT_UB_BYTES, "ASCENDC_EMU_SOC did not select the expected UB size");
#endif
#ifdef EXPECT_MAX_LIVE
static_assert(kSoc.max_live_buffers == EXPECT_MAX_LIVE, "ASCENDC_EMU_SOC did not select the expected row");
#endif

int main() { return kSoc.ub_bytes > 0 ? 0 : 1; }
