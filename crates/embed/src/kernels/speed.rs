//! Time of one matrix product per precision at the encoder's real shapes,
//! for comparing our tiles with library GEMMs (`scripts/bench/products.sh`).
//! A measurement, not a test: it asserts nothing about time and runs only
//! when asked (`--ignored`).

use std::time::Instant;

use super::{bf16, dot, int8, products::x_times_wt};

/// all-MiniLM-L6-v2's four products per layer: (name, inputs, outputs).
const SHAPES: [(&str, usize, usize); 4] = [
    ("qkv", 384, 1152),
    ("attention out", 384, 384),
    ("ff in", 384, 1536),
    ("ff out", 1536, 384),
];

/// Median seconds of `runs` calls of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

#[test]
#[ignore = "a measurement: scripts/bench/products.sh runs it"]
fn product_speed() {
    let rows: usize = std::env::var("REFSCORE_PRODUCT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let threads: usize = std::env::var("REFSCORE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let layout = int8::Layout::here();
    println!(
        "product,rows,inputs,outputs,threads,fp32_gflops,bf16_gflops,bf16_lanes_gflops,int8_gops ({}),int8_gemm_gops,int8_vnni_gops",
        layout.name()
    );
    pool.install(|| {
        for (name, inp, out) in SHAPES {
            let x = dot::random(rows * inp, 1, 0.5, 2.0);
            let w = dot::random(out * inp, 2, 0.5, 2.0);
            let mut dst = vec![0f32; rows * out];
            let fp32 = median(15, || {
                x_times_wt(&x, inp, rows, inp, &w, inp, out, &mut dst, true)
            });
            let wb = bf16::Weight::from_host(&w, (out, inp), dot::bf16_rows());
            let bf16 = median(15, || {
                std::hint::black_box(wb.product(&x, rows));
            });
            // bf16 through the lanes' emulation compiled for AVX2 (the AVX2
            // path before its own unit), beside.
            #[cfg(target_arch = "x86_64")]
            let lanes: dot::Rows =
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA (checked).
                    |x, w, o| unsafe { dot::rows_bf16_lanes_avx2(x, w, o) }
                } else {
                    dot::rows_plain::<dot::lanes::Bf16>
                };
            #[cfg(not(target_arch = "x86_64"))]
            let lanes: dot::Rows = dot::rows_plain::<dot::lanes::Bf16>;
            let wl = bf16::Weight::from_host(&w, (out, inp), lanes);
            let bf16_lanes = median(15, || {
                std::hint::black_box(wl.product(&x, rows));
            });
            let wi = int8::Weight::from_host(&w, (out, inp), layout);
            let int8 = median(15, || {
                std::hint::black_box(wi.product(&x, rows));
            });
            // The portable integers beside, for the tiles' gain over them.
            let wg = int8::Weight::from_host(&w, (out, inp), int8::Layout::Values);
            let int8_gemm = median(15, || {
                std::hint::black_box(wg.product(&x, rows));
            });
            let flops = 2.0 * (rows * inp * out) as f64 / 1e9;
            // The `vpdpbusd` tiles beside, where the CPU has them (on an AMX
            // CPU the layout above is AMX's).
            #[cfg(target_arch = "x86_64")]
            let vnni = dot::Instruction::Vnni.usable().then(|| {
                let wv =
                    int8::Weight::from_host(&w, (out, inp), int8::Layout::Quads(dot::vnni_rows()));
                let t = median(15, || {
                    std::hint::black_box(wv.product(&x, rows));
                });
                format!("{:.1}", flops / t)
            });
            #[cfg(not(target_arch = "x86_64"))]
            let vnni: Option<String> = None;
            println!(
                "{name},{rows},{inp},{out},{threads},{:.1},{:.1},{:.1},{:.1},{:.1},{}",
                flops / fp32,
                flops / bf16,
                flops / bf16_lanes,
                flops / int8,
                flops / int8_gemm,
                vnni.as_deref().unwrap_or("n/a")
            );
        }
    });
}
