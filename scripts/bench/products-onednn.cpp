// oneDNN's matmul at the encoder's product shapes, in fp32, bf16 (bf16 x bf16
// -> f32) and int8 (u8 x s8 -> s32), weights reordered once to the layout
// oneDNN prefers, as ours are packed once. Prints the same CSV columns as
// the embed crate's `product_speed` measurement. Product only: converting
// activations to bf16 or u8 and back is not timed here (ours is).
// Built and run by scripts/bench/products.sh.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <unordered_map>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

static double median_seconds(stream &s, primitive &p,
                             const std::unordered_map<int, memory> &args) {
    p.execute(s, args);
    s.wait();
    std::vector<double> t;
    for (int i = 0; i < 15; i++) {
        auto a = std::chrono::steady_clock::now();
        p.execute(s, args);
        s.wait();
        auto b = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Seconds of one `rows x inp` by `inp x out` product in the given types.
static double time_matmul(engine &eng, stream &s, memory::dim rows, memory::dim inp,
                          memory::dim out, dt src_t, dt wei_t, dt dst_t) {
    memory::desc src_md({rows, inp}, src_t, tag::ab);
    memory::desc wei_any({inp, out}, wei_t, tag::any);
    memory::desc wei_plain({inp, out}, wei_t, tag::ba);
    memory::desc dst_md({rows, out}, dst_t, tag::ab);
    matmul::primitive_desc pd(matmul::desc(src_md, wei_any, dst_md), eng);  // oneDNN 2.x (Debian bookworm)
    memory src(src_md, eng), wei_user(wei_plain, eng), dst(dst_md, eng);
    // Fill with small non-zero bytes: values do not change the speed.
    std::fill_n(static_cast<unsigned char *>(src.get_data_handle()), src_md.get_size(), 3);
    std::fill_n(static_cast<unsigned char *>(wei_user.get_data_handle()),
                wei_plain.get_size(), 1);
    memory wei(pd.weights_desc(), eng);
    reorder(wei_user, wei).execute(s, wei_user, wei);
    s.wait();
    matmul p(pd);
    return median_seconds(s, p, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
}

// GFLOP/s (or G ops/s) of one product, or a negative number where this
// oneDNN has no kernel for the types on this CPU (bf16 without AVX-512, for
// one): a missing kernel is a row's "n/a", not the end of the run.
static double rate(engine &eng, stream &s, memory::dim rows, memory::dim inp,
                   memory::dim out, dt src_t, dt wei_t, dt dst_t) {
    try {
        return 2.0 * rows * inp * out / 1e9 / time_matmul(eng, s, rows, inp, out, src_t, wei_t, dst_t);
    } catch (const dnnl::error &) {
        return -1.0;
    }
}

// One CSV field: the rate, or "n/a" where there was no kernel.
static std::string field(double r) {
    char buf[32];
    if (r < 0) return "n/a";
    std::snprintf(buf, sizeof buf, "%.1f", r);
    return buf;
}

int main() {
    const char *r = std::getenv("REFSCORE_PRODUCT_ROWS");
    const char *th = std::getenv("OMP_NUM_THREADS");
    memory::dim rows = r ? std::atol(r) : 2048;
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    struct Shape { const char *name; memory::dim inp, out; };
    const Shape shapes[] = {{"qkv", 384, 1152}, {"attention out", 384, 384},
                            {"ff in", 384, 1536}, {"ff out", 1536, 384}};
    std::printf("product,rows,inputs,outputs,threads,fp32_gflops,bf16_gflops,int8_gops\n");
    for (const Shape &sh : shapes) {
        // All three first, then one line: ONEDNN_VERBOSE writes to stdout too.
        std::string f = field(rate(eng, s, rows, sh.inp, sh.out, dt::f32, dt::f32, dt::f32));
        std::string b = field(rate(eng, s, rows, sh.inp, sh.out, dt::bf16, dt::bf16, dt::f32));
        std::string i = field(rate(eng, s, rows, sh.inp, sh.out, dt::u8, dt::s8, dt::s32));
        std::printf("%s,%ld,%ld,%ld,%s,%s,%s,%s\n", sh.name, (long)rows, (long)sh.inp,
                    (long)sh.out, th ? th : "?", f.c_str(), b.c_str(), i.c_str());
        std::fflush(stdout);
    }
    return 0;
}
