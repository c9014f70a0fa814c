//! A one-line progress bar on stderr for long work (demo seeding, attribution backfills).

use std::io::Write;
use std::time::Instant;

pub struct Progress {
    label: String,
    total: u64,
    done: u64,
    started: Instant,
    last_draw: Option<Instant>,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Self {
        Progress {
            label: label.to_owned(),
            total: total.max(1),
            done: 0,
            started: Instant::now(),
            last_draw: None,
        }
    }

    pub fn set(&mut self, done: u64) {
        self.done = done.min(self.total);
        let now = Instant::now();
        if self
            .last_draw
            .is_some_and(|t| now.duration_since(t).as_millis() < 200)
            && self.done < self.total
        {
            return;
        }
        self.last_draw = Some(now);
        let width = 30usize;
        let filled = (self.done * width as u64 / self.total) as usize;
        let rate = self.done as f64 / self.started.elapsed().as_secs_f64().max(0.001);
        eprint!(
            "\r  {:<12} [{}{}] {:>3}%  {}/{}  {:.0}/s   ",
            self.label,
            "#".repeat(filled),
            "-".repeat(width - filled),
            self.done * 100 / self.total,
            self.done,
            self.total,
            rate
        );
        let _ = std::io::stderr().flush();
    }

    pub fn add(&mut self, n: u64) {
        self.set(self.done + n);
    }

    pub fn finish(mut self) -> f64 {
        self.last_draw = None;
        self.set(self.total);
        eprintln!();
        self.started.elapsed().as_secs_f64()
    }
}
