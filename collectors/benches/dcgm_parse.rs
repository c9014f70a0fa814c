//! DCGM scrape parse throughput in lines per second, against a baseline that only splits the
//! same text into lines (the least any parser must do), in the same process.
//!
//! cargo bench -p wattledger-agent --bench dcgm_parse

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use wattledger_agent::sources::dcgm::parse as dcgm;

/// An 8-GPU node's scrape: the real exporter's metric set (shared/fixtures) repeated per GPU,
/// two GPUs shared by two Slurm jobs each (series repeated per `hpc_job`).
fn scrape() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/dcgm/dcgm-exporter-metrics.prom"
    );
    let real = std::fs::read_to_string(path).expect("shared/fixtures beside the checkout");
    let uuid = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e";
    let mut out = String::new();
    for g in 0..8 {
        let jobs: &[&str] = if g < 2 { &["101", "102"] } else { &[""] };
        for job in jobs {
            for line in real.lines() {
                if line.starts_with('#') {
                    if g == 0 && (job.is_empty() || *job == "101") {
                        out.push_str(line);
                        out.push('\n');
                    }
                    continue;
                }
                let mut l = line
                    .replace(uuid, &format!("GPU-{g:08}-0000-0000-0000-000000000000"))
                    .replace("gpu=\"0\"", &format!("gpu=\"{g}\""));
                if !job.is_empty() {
                    l = l.replacen('{', &format!("{{hpc_job=\"{job}\","), 1);
                }
                out.push_str(&l);
                out.push('\n');
            }
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let text = scrape();
    let lines = text.lines().count() as u64;
    let readings = dcgm::parse(&text).unwrap();
    assert_eq!(readings.len(), 8);
    let mut g = c.benchmark_group("dcgm_scrape");
    g.throughput(Throughput::Elements(lines));
    g.bench_function("baseline_lines", |b| {
        b.iter(|| black_box(&text).lines().map(str::len).sum::<usize>())
    });
    g.bench_function("dcgm_parse", |b| {
        b.iter(|| dcgm::parse(black_box(&text)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
