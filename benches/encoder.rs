//! The encoder alone: tokens/s of the BERT forward (plus pooling and
//! normalisation) by batch shape, on the real default model. Texts are
//! built from words that are one word-piece each, so every sequence has
//! exactly the intended length.
//!
//! Run: `cargo bench --bench encoder` (needs scripts/fetch-model.sh;
//! REFSCORE_BENCH_THREADS sets the thread count, default 2;
//! REFSCORE_BENCH_PRECISIONS the precisions, default fp32,bf16,int8, the
//! first being the one the ratios divide by).

use std::time::Instant;

use candle_core::{Device, Tensor};
use refscore_embed::{EmbedOptions, EmbeddingStage, Precision};

const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "was", "he", "for", "it", "with", "as", "his", "on",
    "be", "at", "by", "had", "are", "but", "from", "or", "have", "they", "which", "one", "you",
    "were", "her", "all", "she", "there", "would", "their", "we", "him", "been", "has", "when",
    "who", "will", "more", "no", "if", "out", "so", "said", "what", "up", "its", "about", "into",
    "than", "them", "can", "only", "other", "new", "some", "could", "time", "these", "two", "may",
    "then", "do", "first", "any", "my", "now", "such", "like", "our",
];

fn text(len: usize, seed: usize) -> String {
    (0..len)
        .map(|k| WORDS[(seed * 7 + k * 13 + k * k) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let threads = std::env::var("REFSCORE_BENCH_THREADS").unwrap_or_else(|_| "2".into());
    std::env::set_var("RAYON_NUM_THREADS", &threads);
    let precisions: Vec<Precision> = std::env::var("REFSCORE_BENCH_PRECISIONS")
        .unwrap_or_else(|_| "fp32,bf16,int8".into())
        .split(',')
        .map(|p| Precision::from_name(p.trim()).expect("fp32, bf16 or int8"))
        .collect();
    let mut stages: Vec<EmbeddingStage> = precisions
        .iter()
        .map(|&precision| {
            let options = EmbedOptions {
                precision,
                ..EmbedOptions::default()
            };
            EmbeddingStage::load(options).expect("model (run scripts/fetch-model.sh)")
        })
        .collect();
    // Warm up.
    let warm: Vec<String> = (0..16).map(|s| text(30, s)).collect();
    for stage in &mut stages {
        stage
            .embed(&warm.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap();
    }
    println!(
        "threads {threads}; kernels {}; tokens include [CLS]/[SEP]; best tokens/s of {REPEATS} runs \
         (median in brackets), precisions measured side by side, shape by shape",
        stages[0].kernel_path().name()
    );
    print!("{:>6} {:>6}", "texts", "tokens");
    for p in &precisions {
        print!(" {:>20}", p.name());
    }
    for p in precisions.iter().skip(1) {
        print!(" {:>10}", format!("{}/{}", p.name(), precisions[0].name()));
    }
    println!();
    for (count, words) in [
        (256, 6),
        (256, 14),
        (128, 30),
        (64, 62),
        (32, 126),
        (16, 254),
    ] {
        let texts: Vec<String> = (0..count).map(|s| text(words, s)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut rates = vec![Vec::new(); stages.len()];
        // Round-robin over the precisions, so drifts of the machine hit
        // them alike.
        for _ in 0..REPEATS {
            for (stage, rates) in stages.iter_mut().zip(&mut rates) {
                let t0 = Instant::now();
                let out = stage.embed(&refs).unwrap();
                let secs = t0.elapsed().as_secs_f64();
                let tokens: usize = out.iter().map(|e| e.ids.len()).sum();
                assert_eq!(tokens, count * (words + 2), "one word-piece per word");
                rates.push(tokens as f64 / secs);
            }
        }
        print!("{count:>6} {:>6}", words + 2);
        let mut best = Vec::new();
        for r in &mut rates {
            r.sort_by(f64::total_cmp);
            best.push(r[REPEATS - 1]);
            print!(
                " {:>20}",
                format!("{:.0} ({:.0})", r[REPEATS - 1], r[REPEATS / 2])
            );
        }
        for b in best.iter().skip(1) {
            print!(" {:>10.2}", b / best[0]);
        }
        println!();
    }
    gemm_alone();
}

/// Each shape runs REPEATS times per precision: these machines are noisy,
/// and the best of several short runs is the steadiest figure of what the
/// code can do.
const REPEATS: usize = 5;

/// The matrix products alone, at the shapes of one 2,048-token batch of
/// all-MiniLM-L6-v2 (hidden 384, feed-forward 1,536), through the same
/// Candle matmul the forward uses: the rate gemm reaches on this machine,
/// and the tokens/s a forward made of nothing but these products would get.
fn gemm_alone() {
    let n = 2048;
    let dev = Device::Cpu;
    println!();
    println!("matmul alone, {n} rows (best of 5 × 10 products):");
    let mut total_secs = 0.0;
    let mut total_flop = 0.0;
    // (inner, outer, products per layer): QKV, attention output, FFN in, FFN out.
    for (k, m, per_layer) in [
        (384, 1152, 1),
        (384, 384, 1),
        (384, 1536, 1),
        (1536, 384, 1),
    ] {
        let x = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
        let wt = w.t().unwrap();
        x.matmul(&wt).unwrap();
        let best = (0..5)
            .map(|_| {
                let t0 = Instant::now();
                for _ in 0..10 {
                    x.matmul(&wt).unwrap();
                }
                t0.elapsed().as_secs_f64() / 10.0
            })
            .fold(f64::INFINITY, f64::min);
        let flop = 2.0 * (n * k * m) as f64;
        println!("  [{n}×{k}]·[{k}×{m}]: {:>6.1} GFLOP/s", flop / best / 1e9);
        total_secs += best * per_layer as f64;
        total_flop += flop * per_layer as f64;
    }
    let per_token = total_flop / n as f64 * 6.0;
    println!(
        "  all four: {:.1} GFLOP/s; a forward of only these products: {:.0} tokens/s ({:.1} MFLOP/token)",
        total_flop / total_secs / 1e9,
        n as f64 / (total_secs * 6.0),
        per_token / 1e6
    );
}
