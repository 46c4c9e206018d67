/* ascendc_emu/core.h: launch context, device-rule errors, warnings, counters, SoC choice and the
 * GM allocation registry. Everything here is emulator-only (namespace AscendC::emu) except
 * GetBlockIdx/GetBlockNum.
 */
#ifndef ASCENDC_EMU_CORE_H
#define ASCENDC_EMU_CORE_H

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "types.h"

namespace AscendC {
namespace emu {

/* A broken device rule: thrown out of ICPU_RUN_KF; the message names kernel, block, API, numbers. */
class DeviceRuleError : public std::runtime_error {
 public:
    explicit DeviceRuleError(const std::string& msg) : std::runtime_error(msg) {}
};

struct OpCount {
    int64_t instrs = 0;
    int64_t elems = 0;
};

struct Counters {
    int64_t gm_read_bytes = 0;
    int64_t gm_write_bytes = 0;
    int64_t datacopy_calls = 0;
    int64_t vector_instrs = 0;
    int64_t vector_elems = 0;
    std::map<std::string, OpCount> vector_by_op;
    int64_t scalar_writes = 0;  // SetValue calls (UB or GM): elements moved by the scalar unit
    int64_t cube_macs = 0;
    int64_t peak_ub_bytes = 0;
    int64_t peak_l1_bytes = 0;   // L1 / L0A / L0B / L0C planned by InitBuffer (cube side,
    int64_t peak_l0a_bytes = 0;  // including what a Matmul object reserves)
    int64_t peak_l0b_bytes = 0;
    int64_t peak_l0c_bytes = 0;
    std::vector<std::string> warnings;
    // Which context these counters belong to (blocks[] of the launch JSON).
    const char* core_type = "AIV";  // "AIC" or "AIV" (CoreKind)
    int64_t block = 0;              // its GetBlockIdx()
    int64_t group = 0;              // its AIC group (block / task_ratio for AIVs)
};

struct LaunchStats {
    std::string kernel;
    int64_t block_dim = 0;
    int64_t task_ratio = 1;  // kernel body runs per block (2 for MIX_MODE on 910B: per AIV)
    std::string soc;
    Counters total;
    std::vector<Counters> blocks;
    std::vector<std::string> warnings;
};

/* Light string building for messages (no iostreams; out-of-line pieces keep compile time low). */
struct Hex { uintptr_t v; };
void Put(std::string& s, const char* v);
void Put(std::string& s, const std::string& v);
void PutI(std::string& s, long long v);
void PutU(std::string& s, unsigned long long v);
void Put(std::string& s, double v);
void Put(std::string& s, Hex h);
inline void Put(std::string& s, char c) { s += c; }
inline void Put(std::string& s, bool b) { s += b ? "true" : "false"; }
template <typename T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
inline void Put(std::string& s, T v) {
    if (std::is_signed<T>::value) PutI(s, static_cast<long long>(v));
    else PutU(s, static_cast<unsigned long long>(v));
}
template <typename... A>
[[gnu::cold]] inline std::string Cat(A... parts) {
    std::string s;
    (Put(s, parts), ...);
    return s;
}

/* ---------------- global settings ---------------- */
struct Settings {
    std::atomic<const SocProfile*> soc{nullptr};
    std::atomic<int> strict{-1};   // -1: take env ASCENDC_EMU_STRICT
    std::atomic<int> threads{-1};  // -1: take env ASCENDC_EMU_THREADS
    std::atomic<int> kernel_mode{static_cast<int>(KernelMode::AIV_MODE)};
    std::atomic<uint64_t> tiling_key{0};
};
Settings& Global();
std::string KnownSocNames();
/* Select the SoC profile by name; throws std::invalid_argument listing the known names. */
void SetSoc(const std::string& name);
/* Active SoC: SetSoc(), else env ASCENDC_EMU_SOC, else -DASCENDC_EMU_SOC (default Ascend910B1). */
const SocProfile& ActiveSoc();
/* Warnings become DeviceRuleErrors (default: env ASCENDC_EMU_STRICT=1). */
void SetStrict(bool on);
bool Strict();
/* Run the blocks of a launch on std::threads (default: env ASCENDC_EMU_THREADS=1). */
void SetRunOnThreads(bool on);
bool RunOnThreads();
inline uint64_t TilingKey() { return Global().tiling_key.load(); }

/* ---------------- physical memories ---------------- */
enum class Mem : uint8_t { UB = 0, L1, L0A, L0B, L0C, NONE };
constexpr int kMemCount = 5;

inline Mem MemOf(TPosition p) {
    switch (p) {
        case TPosition::VECIN: case TPosition::VECOUT: case TPosition::VECCALC: case TPosition::CO2:
            return Mem::UB;
        case TPosition::A1: case TPosition::B1: case TPosition::C1: case TPosition::TSCM:
            return Mem::L1;
        case TPosition::A2: return Mem::L0A;
        case TPosition::B2: return Mem::L0B;
        case TPosition::CO1: return Mem::L0C;
        default: return Mem::NONE;
    }
}
inline const char* MemName(Mem m) {
    static const char* names[] = {"UB", "L1", "L0A", "L0B", "L0C", "none"};
    return names[static_cast<int>(m)];
}
inline int64_t MemCapacity(Mem m, const SocProfile& s) {
    switch (m) {
        case Mem::UB: return s.ub_bytes;
        case Mem::L1: return s.l1_bytes;
        case Mem::L0A: return s.l0a_bytes;
        case Mem::L0B: return s.l0b_bytes;
        case Mem::L0C: return s.l0c_bytes;
        default: return 0;
    }
}
inline const char* PosName(TPosition p) {
    static const char* names[] = {"GM", "A1", "A2", "B1", "B2", "C1", "C2", "CO1", "CO2", "VECIN",
                                  "VECOUT", "VECCALC", "SPM", "TSCM", "C2PIPE2GM", "C2PIPE2LOCAL",
                                  "MAX"};
    return names[static_cast<int>(p)];
}

/* One buffer carved by InitBuffer. Owned by the block context, so tensors never dangle. */
enum class BufState : uint8_t { FREE = 0, ALLOCATED, ENQUEUED, DEQUEUED, TBUF };
struct ByteRange {
    uint32_t lo = 0, hi = 0;  // empty when lo >= hi
    void Add(uint32_t a, uint32_t b) {
        if (lo >= hi) { lo = a; hi = b; return; }
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    bool Hits(uint32_t a, uint32_t b) const { return lo < hi && a < hi && lo < b; }
    void Clear() { lo = hi = 0; }
};
struct BufferInfo {
    Mem mem = Mem::NONE;
    TPosition pos = TPosition::VECCALC;
    uint8_t* host = nullptr;  // start of the buffer in the arena
    uint32_t offset = 0;      // byte offset inside the physical memory
    uint32_t len = 0;         // bytes (rounded up to 32)
    const void* owner = nullptr;  // queue or TBuf object
    const char* owner_kind = "TQue";
    int index = 0;            // buffer number inside its owner
    BufState state = BufState::FREE;
    uint32_t gen = 1;         // bumped on every AllocTensor, FreeTensor and pipe reset
    bool released = false;    // its TPipe was reset or destroyed
    ByteRange mte2_pending;   // written by MTE2 (GM->local), not yet synchronised for V
    ByteRange v_pending;      // written by V, not yet synchronised for MTE3
};

inline int FlagKey(int srcPipe, int dstPipe) { return srcPipe * 16 + dstPipe; }

/* The core type a context reports (ASCEND_IS_AIC / ASCEND_IS_AIV): AIC for an AIC_MODE launch and
 * for the AIC programs of a MIX 1:2 launch on a split chip (2201), AIV otherwise (coupled chips'
 * single AI core included, as CANN's CPU debug reports it). */
enum class CoreKind : uint8_t { AIV = 0, AIC };
struct CrossCoreLaunch;  // cross_core.h: flags, clocks and the GM shadow of a MIX 1:2 launch

struct GmWrite {
    uintptr_t b, e;  // written byte range [b, e)
    int64_t blk;
    bool atomic = false;  // an atomic add (SetAtomicAdd / enAtomic 1): commutes with other adds
};

/* A GM range an asynchronous IterateAll<false> writes (matmul_async.h): the AIC may still be
 * writing it until the AIV's WaitIterateAll for it returns, so any access of the block to it
 * before then is an error. */
struct PendingGm {
    uintptr_t b, e;
    const void* owner;  // the Matmul object that posted it
    int64_t panel;      // its index among the object's asynchronous IterateAll calls
};

/* Per-block state: one per block of a launch (thread_local while the block runs). */
struct BlockCtx {
    std::string kernel = "<no launch>";
    int64_t idx = 0;
    int64_t num = 1;
    int64_t sub = 0;    // GetSubBlockIdx: which AIV of its AIC (MIX 1:2 on split chips)
    int64_t ratio = 1;  // GetTaskRation: AIVs per AIC in this launch
    Counters c;
    std::vector<int64_t> warn_repeats;  // parallel to c.warnings
    uint8_t* arena[kMemCount] = {nullptr, nullptr, nullptr, nullptr, nullptr};
    int64_t used[kMemCount] = {0, 0, 0, 0, 0};
    std::deque<BufferInfo> buffers;
    int live[static_cast<int>(TPosition::MAX) + 1] = {};
    uint8_t flags[256][8] = {};
    std::vector<GmWrite> gm_writes;
    std::vector<PendingGm> pending_gm;  // panels of asynchronous IterateAll calls not yet waited
    std::exception_ptr error;
    void* pipe = nullptr;  // current TPipe
    bool atomic_add = false;
    const char* atomic_type = nullptr;  // SetAtomicAdd<T>'s T (TypeName), nullptr: none
    std::vector<std::string> leaks;
    uint64_t vec_mask[2] = {~0ull, ~0ull};
    uint8_t* sys_workspace = nullptr;  // SetSysWorkspace (cube.h)
    CoreKind core = CoreKind::AIV;
    int64_t group = 0;           // AIC group of this context
    bool probing = false;        // the AIC probe of a MIX 1:2 launch (cross_core.h)
    bool core_queried = false;   // ASCEND_IS_AIC / ASCEND_IS_AIV evaluated by the kernel
    CrossCoreLaunch* xc = nullptr;  // set in a launch that runs AIC programs
    int xid = -1;                   // index of this context in that launch (its vector-clock slot)

    BlockCtx() = default;
    BlockCtx(const BlockCtx&) = delete;
    BlockCtx& operator=(const BlockCtx&) = delete;
    ~BlockCtx();
    uint8_t* Arena(Mem m);  // the block's byte arena of memory m (0xFF-filled)
};

BlockCtx*& CurrentSlot();
/* The running block's context (a thread-local fallback outside ICPU_RUN_KF). */
BlockCtx& Ctx();

/* Throw a DeviceRuleError naming kernel, block and API. */
[[noreturn, gnu::cold]] void Fail(const std::string& api, const std::string& what);
/* Record a warning (deduplicated per block); in strict mode it is a DeviceRuleError. */
void Warn(const std::string& api, const std::string& what);
void CountVector(const char* op, int64_t instrs, int64_t elems);
/* Instructions of a count-form call: one per 256-byte repeat. */
inline int64_t Repeats(int64_t count, size_t elemBytes) {
    return (count * static_cast<int64_t>(elemBytes) + 255) / 256;
}

/* ---------------- GM allocations (GmAlloc) ---------------- */
struct GmAllocation {
    size_t size;  // bytes the caller asked for
    size_t span;  // size plus the trailing guard zone that derived pointers may land in
};
struct GmRegistry {
    std::mutex mu;
    std::map<uintptr_t, GmAllocation> allocs;
    std::mutex atomic_mu;
};
GmRegistry& Gm();
/* The allocation a pointer belongs to (it may lie in the guard zone past the end). */
bool FindGmAllocation(const void* p, uintptr_t* begin, size_t* size);
/* Remember a GM write of this block for the end-of-launch overlap check: `atomic` for an atomic
 * add, which may overlap other blocks' atomic adds but not their plain writes. */
void RecordGmWrite(uintptr_t b, uintptr_t e, bool atomic = false);

}  // namespace emu

/* ---------------- kernel-side identity ---------------- */
inline int64_t GetBlockIdx() { return emu::Ctx().idx; }
inline int64_t GetBlockNum() { return emu::Ctx().num; }
inline int64_t GetSubBlockIdx() { return emu::Ctx().sub; }
inline int64_t GetTaskRation() { return emu::Ctx().ratio; }
inline int64_t GetTaskRatio() { return emu::Ctx().ratio; }
/* AIVs per AIC as a context sees it: 1 on an AIC (as dav_c220's GetSubBlockNumImpl). */
inline int64_t GetSubBlockNum() { return emu::Ctx().core == emu::CoreKind::AIC ? 1 : emu::Ctx().ratio; }

namespace emu {
/* ASCEND_IS_AIC: the running context's core (an AIC context of a MIX 1:2 launch, or any context
 * of an AIC_MODE launch); outside a launch the host's kernel mode. Marks that the kernel asked,
 * which tells the MIX 1:2 probe that the kernel has a core-type branch (cross_core.h). */
inline bool IsAicCore() {
    BlockCtx* c = CurrentSlot();
    if (c == nullptr) return Global().kernel_mode.load() == static_cast<int>(KernelMode::AIC_MODE);
    c->core_queried = true;
    return c->core == CoreKind::AIC;
}
}  // namespace emu

}  // namespace AscendC

#define ASCEND_IS_AIV (!::AscendC::emu::IsAicCore())
#define ASCEND_IS_AIC (::AscendC::emu::IsAicCore())
#define ASCEND_IS_NOT_AIV (!(ASCEND_IS_AIV))
#define ASCEND_IS_NOT_AIC (!(ASCEND_IS_AIC))
#define TILING_KEY_IS(k) (::AscendC::emu::TilingKey() == static_cast<uint64_t>(k))

#endif  // ASCENDC_EMU_CORE_H
