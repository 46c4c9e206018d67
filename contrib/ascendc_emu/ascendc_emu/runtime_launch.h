/* ascendc_emu/runtime_launch.h: out-of-line part of launch.h: GM allocation, running the blocks
 * of a launch, the end-of-launch checks and the statistics (with their JSON form). Included by
 * runtime.h only.
 */
#ifndef ASCENDC_EMU_RUNTIME_LAUNCH_H
#define ASCENDC_EMU_RUNTIME_LAUNCH_H

#include <algorithm>
#include <thread>

#include "launch.h"

namespace AscendC {

ASCENDC_EMU_RT void* GmAlloc(size_t size) {
    size_t body = (size + 31) / 32 * 32;
    size_t guard = std::max<size_t>(body, 4096);
    size_t total = (body + guard + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, total);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, body);
    emu::GmRegistry& g = emu::Gm();
    std::lock_guard<std::mutex> lock(g.mu);
    g.allocs[reinterpret_cast<uintptr_t>(p)] = emu::GmAllocation{size, body + guard};
    return p;
}
ASCENDC_EMU_RT void GmFree(void* ptr) {
    if (ptr == nullptr) return;
    emu::GmRegistry& g = emu::Gm();
    {
        std::lock_guard<std::mutex> lock(g.mu);
        auto it = g.allocs.find(reinterpret_cast<uintptr_t>(ptr));
        if (it == g.allocs.end()) {
            throw std::invalid_argument("ascendc_emu: GmFree: pointer was not returned by GmAlloc");
        }
        g.allocs.erase(it);
    }
    std::free(ptr);
}

namespace emu {

ASCENDC_EMU_RT std::mutex& StatsMutex() {
    static std::mutex m;
    return m;
}
ASCENDC_EMU_RT LaunchStats& LastLaunchSlot() {
    static LaunchStats s;
    return s;
}
/* Statistics of the most recent ICPU_RUN_KF (also filled when it threw). */
ASCENDC_EMU_RT const LaunchStats& LastLaunch() { return LastLaunchSlot(); }

ASCENDC_EMU_RT std::string JsonStr(const std::string& s) {
    std::string o = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            default:
                if (ch < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", ch);
                    o += b;
                } else {
                    o += static_cast<char>(ch);
                }
        }
    }
    return o + "\"";
}
ASCENDC_EMU_RT std::string CountersJson(const Counters& c) {
    std::string o = Cat("\"gm_read_bytes\":", c.gm_read_bytes, ",\"gm_write_bytes\":", c.gm_write_bytes,
                        ",\"datacopy_calls\":", c.datacopy_calls, ",\"vector_instrs\":", c.vector_instrs,
                        ",\"vector_elems\":", c.vector_elems, ",\"scalar_writes\":", c.scalar_writes,
                        ",\"vector_by_op\":{");
    bool first = true;
    for (const auto& kv : c.vector_by_op) {
        o += Cat(first ? "" : ",", JsonStr(kv.first), ":{\"instrs\":", kv.second.instrs,
                 ",\"elems\":", kv.second.elems, "}");
        first = false;
    }
    o += Cat("},\"cube_macs\":", c.cube_macs, ",\"peak_ub_bytes\":", c.peak_ub_bytes,
             ",\"peak_l1_bytes\":", c.peak_l1_bytes, ",\"peak_l0a_bytes\":", c.peak_l0a_bytes,
             ",\"peak_l0b_bytes\":", c.peak_l0b_bytes, ",\"peak_l0c_bytes\":", c.peak_l0c_bytes,
             ",\"warnings\":[");
    for (size_t i = 0; i < c.warnings.size(); ++i) o += (i ? "," : "") + JsonStr(c.warnings[i]);
    return o + "]";
}
/* Compact JSON: kernel, soc, block_dim, the total counters, warnings, and blocks[] (same keys). */
ASCENDC_EMU_RT std::string ToJson(const LaunchStats& s) {
    std::string o = Cat("{\"kernel\":", JsonStr(s.kernel), ",\"soc\":", JsonStr(s.soc),
                        ",\"block_dim\":", s.block_dim, ",\"task_ratio\":", s.task_ratio, ",");
    Counters total = s.total;
    total.warnings = s.warnings;
    o += CountersJson(total) + ",\"blocks\":[";
    for (size_t b = 0; b < s.blocks.size(); ++b) {
        const Counters& k = s.blocks[b];
        o += Cat(b ? "," : "", "{\"block\":", k.block, ",\"core_type\":", JsonStr(k.core_type),
                 ",\"group\":", k.group, ",", CountersJson(k), "}");
    }
    return o + "]}";
}

/* End-of-block checks that only warn: leaked buffers, flags set and never waited. */
ASCENDC_EMU_RT void FinishBlock(BlockCtx& c) {
    for (const auto& leak : c.leaks) Warn("kernel end", leak);
    for (int k = 0; k < 256; ++k) {
        for (int id = 0; id < QUE_MAX_EVENT; ++id) {
            if (c.flags[k][id]) {
                Warn("kernel end", Cat("SetFlag(", PipeName(pipe_t(k / 16)), " -> ", PipeName(pipe_t(k % 16)),
                                       ", event ID ", id, ") was never waited for"));
            }
        }
    }
    if (c.atomic_add) Warn("kernel end", "SetAtomicAdd still active (call SetAtomicNone)");
    for (size_t i = 0; i < c.c.warnings.size(); ++i) {
        if (c.warn_repeats[i] > 1) c.c.warnings[i] += Cat(" (x", c.warn_repeats[i], ")");
    }
}

ASCENDC_EMU_RT void Merge(Counters& t, const Counters& b) {
    t.gm_read_bytes += b.gm_read_bytes;
    t.gm_write_bytes += b.gm_write_bytes;
    t.datacopy_calls += b.datacopy_calls;
    t.vector_instrs += b.vector_instrs;
    t.vector_elems += b.vector_elems;
    t.scalar_writes += b.scalar_writes;
    for (const auto& kv : b.vector_by_op) {
        t.vector_by_op[kv.first].instrs += kv.second.instrs;
        t.vector_by_op[kv.first].elems += kv.second.elems;
    }
    t.cube_macs += b.cube_macs;
    t.peak_ub_bytes = std::max(t.peak_ub_bytes, b.peak_ub_bytes);
    t.peak_l1_bytes = std::max(t.peak_l1_bytes, b.peak_l1_bytes);
    t.peak_l0a_bytes = std::max(t.peak_l0a_bytes, b.peak_l0a_bytes);
    t.peak_l0b_bytes = std::max(t.peak_l0b_bytes, b.peak_l0b_bytes);
    t.peak_l0c_bytes = std::max(t.peak_l0c_bytes, b.peak_l0c_bytes);
}

/* Overlapping GM writes from different blocks of one launch. Atomic adds commute, so two blocks
 * may add to the same bytes (split-K's partial sums); a plain write overlapping another block's
 * write of either kind is flagged (the result depends on the blocks' order). The sweep keeps,
 * per kind, the interval reaching furthest so far. */
ASCENDC_EMU_RT std::string FindWriteOverlap(BlockCtx* blocks, int64_t n) {
    std::vector<GmWrite> all;
    for (int64_t i = 0; i < n; ++i) all.insert(all.end(), blocks[i].gm_writes.begin(), blocks[i].gm_writes.end());
    std::sort(all.begin(), all.end(), [](const GmWrite& x, const GmWrite& y) { return x.b < y.b; });
    long far[2] = {-1, -1};  // per kind (0 plain, 1 atomic): the interval reaching furthest so far
    for (size_t i = 0; i < all.size(); ++i) {
        for (int kind = 0; kind < 2; ++kind) {
            if (far[kind] < 0 || (kind == 1 && all[i].atomic)) continue;  // atomic adds commute
            const GmWrite& o = all[size_t(far[kind])];
            if (!(all[i].b < o.e && all[i].blk != o.blk)) continue;
            uintptr_t lo = all[i].b, hi = std::min(all[i].e, o.e);
            uintptr_t base = 0;
            size_t size = 0;
            std::string where;
            if (FindGmAllocation(reinterpret_cast<void*>(lo), &base, &size)) {
                where = Cat("bytes [", lo - base, ", ", hi - base, ") of a ", size, " B GmAlloc buffer");
            } else {
                where = Cat("bytes [", Hex{lo}, ", ", Hex{hi}, ")");
            }
            int64_t a = std::min(all[i].blk, o.blk), b = std::max(all[i].blk, o.blk);
            if (all[i].atomic || o.atomic) {
                const int64_t plain = all[i].atomic ? o.blk : all[i].blk;
                return Cat("blocks ", a, "/", n, " and ", b, "/", n, " both write ", where, ": block ", plain,
                           " with a plain write, the other with an atomic add (the plain write is lost "
                           "or overwrites the sum, by the blocks' order; zero the output before the "
                           "launch and add from every block)");
            }
            return Cat("blocks ", a, "/", n, " and ", b, "/", n, " both write ", where,
                       " (overlapping GM writes from different blocks; use SetAtomicAdd if intended)");
        }
        const int mine = all[i].atomic ? 1 : 0;
        if (far[mine] < 0 || all[i].e > all[size_t(far[mine])].e) far[mine] = long(i);
    }
    return "";
}

ASCENDC_EMU_RT void RunOneBlock(BlockCtx* ctx, BlockBody body, void* arg) {
    CurrentSlot() = ctx;
    try {
        body(arg);
        FinishBlock(*ctx);
    } catch (...) {
        ctx->error = std::current_exception();
    }
    CurrentSlot() = nullptr;
}

/* Fills LastLaunch() from the contexts of a finished launch (and ASCENDC_EMU_STATS_FILE). */
ASCENDC_EMU_RT void PublishLaunch(const char* name, int64_t blockDim, int64_t ratio, BlockCtx* ctxs, int64_t n) {
    std::lock_guard<std::mutex> lock(StatsMutex());
    LaunchStats& st = LastLaunchSlot();
    st = LaunchStats();
    st.kernel = name;
    st.block_dim = blockDim;
    st.task_ratio = ratio;
    st.soc = ActiveSoc().name;
    for (int64_t b = 0; b < n; ++b) {
        Merge(st.total, ctxs[b].c);
        st.warnings.insert(st.warnings.end(), ctxs[b].c.warnings.begin(), ctxs[b].c.warnings.end());
        st.blocks.push_back(std::move(ctxs[b].c));
    }
    const char* path = std::getenv("ASCENDC_EMU_STATS_FILE");
    if (path != nullptr && path[0] != '\0') {
        if (FILE* f = std::fopen(path, "a")) {
            std::string line = ToJson(st) + "\n";
            std::fwrite(line.data(), 1, line.size(), f);
            std::fclose(f);
        }
    }
}

}  // namespace emu
}  // namespace AscendC

#include "runtime_cross_core.h"

namespace AscendC {
namespace emu {

ASCENDC_EMU_RT void RunKernelImpl(const char* name, int64_t blockDim, BlockBody body, void* arg) {
    const SocProfile& soc = ActiveSoc();
    if (blockDim < 1 || blockDim > 65535) {
        throw DeviceRuleError(Cat("ascendc_emu: kernel ", name, ": ICPU_RUN_KF: blockDim ", blockDim,
                                  " is outside [1, 65535]"));
    }
    // MIX_MODE on a split chip (910B/A3) is CANN's default 1:2 mix: each of the blockDim AIC
    // groups drives two AIVs. A kernel with an AIC program runs all three contexts of every group
    // (cross_core.h); one whose AIC serves the Matmul API (or does nothing) runs the body once
    // per AIV (GetBlockIdx 0 .. 2 * blockDim - 1, GetSubBlockIdx 0/1). MIX_AIC_1_1 and the
    // coupled chips run one per block.
    const int kernelMode = Global().kernel_mode.load();
    const int64_t ratio = kernelMode == static_cast<int>(KernelMode::MIX_MODE) && soc.npu_arch == 2201 ? 2 : 1;
    if (ratio == 2 && ProbeAicProgram(name, blockDim, body, arg)) {
        RunCrossCoreLaunch(name, blockDim, body, arg);
        return;
    }
    const int64_t runs = blockDim * ratio;
    const bool aic = kernelMode == static_cast<int>(KernelMode::AIC_MODE);
    std::unique_ptr<BlockCtx[]> ctxs(new BlockCtx[static_cast<size_t>(runs)]);
    for (int64_t b = 0; b < runs; ++b) {
        ctxs[b].kernel = name;
        ctxs[b].idx = b;
        ctxs[b].num = blockDim;
        ctxs[b].sub = b % ratio;
        ctxs[b].ratio = ratio;
        ctxs[b].group = b / ratio;
        ctxs[b].core = aic ? CoreKind::AIC : CoreKind::AIV;
        ctxs[b].c.core_type = aic ? "AIC" : "AIV";
        ctxs[b].c.block = b;
        ctxs[b].c.group = b / ratio;
    }
    if (RunOnThreads()) {
        std::unique_ptr<std::thread[]> threads(new std::thread[static_cast<size_t>(runs)]);
        for (int64_t b = 0; b < runs; ++b) threads[b] = std::thread(RunOneBlock, &ctxs[b], body, arg);
        for (int64_t b = 0; b < runs; ++b) threads[b].join();
    } else {
        for (int64_t b = 0; b < runs; ++b) {
            RunOneBlock(&ctxs[b], body, arg);
            if (ctxs[b].error) break;
        }
    }
    std::exception_ptr first;
    for (int64_t b = 0; b < runs && !first; ++b) first = ctxs[b].error;
    std::string overlap = first ? std::string() : FindWriteOverlap(ctxs.get(), runs);
    PublishLaunch(name, blockDim, ratio, ctxs.get(), runs);
    if (first) std::rethrow_exception(first);
    if (!overlap.empty()) {
        throw DeviceRuleError(Cat("ascendc_emu: kernel ", name, ", launch end: ", overlap));
    }
}

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_RUNTIME_LAUNCH_H
