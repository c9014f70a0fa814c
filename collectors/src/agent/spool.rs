//! The on-disk spool: every batch is written here (and fsynced) before it is sent, and
//! removed only after the server has acknowledged it.
//!
//! A write-ahead log of segment files (`<id>.seg`), each a run of frames
//! `len: u32 LE | crc32: u32 LE | JSON entry`, and a `cursor` file naming the first
//! unacknowledged frame. A crash mid-append leaves a torn last frame, which `open` cuts off;
//! an append that fails (a full disk: ENOSPC part-way through the frame) cuts its own bytes
//! off at once, so the next append follows the last whole frame and nothing after a torn one
//! is cut off with it at the next start;
//! a crash mid-ack leaves the old cursor, so acknowledged entries are sent again, which the
//! idempotent ingest API absorbs. Segments wholly before the cursor are deleted.
//!
//! Sources that keep state between reads (token counters' baselines) put it in the entry with
//! their records, so the state on disk always matches what was spooled: `open` recovers each
//! source's latest state from the acknowledged-state file and the unacknowledged entries.
//!
//! The spool is bounded: when full, `append` refuses the new entry and keeps the old ones
//! (the oldest data is what an outage would otherwise lose first); the caller says so loudly.

use crate::records::Batch;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const SEGMENT_BYTES: u64 = 4 << 20;
const HEADER: u64 = 8;
/// No entry is this big; a larger length is a torn or corrupt header.
const MAX_FRAME: u32 = 256 << 20;

/// What one append stores: a batch, and the state of the source that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub batch: Batch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SourceState>,
}

/// A source's state as of this entry, recovered after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceState {
    pub source: String,
    pub value: serde_json::Value,
}

/// A position in the spool: a segment and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub segment: u64,
    pub offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool full: {pending} bytes pending of {max}; the new entry ({entry} bytes) was not written")]
    Full { pending: u64, max: u64, entry: u64 },
    #[error("spool I/O in {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("spool entry at segment {} offset {} is corrupt: {reason}", .at.segment, .at.offset)]
    Corrupt { at: Pos, reason: FrameError },
    /// The cursor file (what the server has acknowledged) does not read as a position.
    #[error("spool cursor file {} is not `<segment> <offset>`", .path.display())]
    Cursor { path: PathBuf },
}

/// Why the bytes at a position of a segment are not a whole, valid frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("truncated header")]
    TruncatedHeader,
    #[error("frame length {0} runs past the segment")]
    TooLong(u32),
    #[error("checksum mismatch")]
    Checksum,
    #[error("not an entry: {0}")]
    NotAnEntry(serde_json::Error),
}

/// Truncates a segment to `len`, durably.
fn cut_to(path: &Path, len: u64) -> Result<(), SpoolError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    f.set_len(len).map_err(io_err(path))?;
    f.sync_data().map_err(io_err(path))
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    id: u64,
    len: u64,
}

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    segments: VecDeque<Segment>,
    cursor: Pos,
    writer: File,
    acked_states: BTreeMap<String, serde_json::Value>,
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, cutting off a torn last frame.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool, SpoolError> {
        Self::open_with_segments(dir, max_bytes, SEGMENT_BYTES)
    }

    /// `open` with another segment size (tests use small ones to exercise rolling).
    pub fn open_with_segments(
        dir: &Path,
        max_bytes: u64,
        segment_bytes: u64,
    ) -> Result<Spool, SpoolError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut ids: Vec<u64> = fs::read_dir(dir)
            .map_err(io_err(dir))?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".seg")?.parse().ok()
            })
            .collect();
        ids.sort_unstable();
        let cursor = read_cursor(dir)?.unwrap_or(Pos {
            segment: ids.first().copied().unwrap_or(1),
            offset: 0,
        });
        let mut segments = VecDeque::new();
        for &id in &ids {
            let path = segment_path(dir, id);
            if id < cursor.segment {
                // Acknowledged but not yet deleted when the agent stopped.
                fs::remove_file(&path).map_err(io_err(&path))?;
                continue;
            }
            let len = fs::metadata(&path).map_err(io_err(&path))?.len();
            segments.push_back(Segment { id, len });
        }
        if let Some(last) = segments.back_mut() {
            let valid = valid_prefix(&segment_path(dir, last.id))?;
            if valid < last.len {
                tracing::warn!(
                    segment = last.id,
                    kept = valid,
                    cut = last.len - valid,
                    "spool: cutting off a torn entry left by a crash mid-write"
                );
                let path = segment_path(dir, last.id);
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(&path))?;
                f.set_len(valid).map_err(io_err(&path))?;
                f.sync_all().map_err(io_err(&path))?;
                last.len = valid;
            }
        }
        if segments.is_empty() {
            segments.push_back(Segment {
                id: cursor.segment,
                len: 0,
            });
        }
        let last = *segments.back().expect("one segment");
        let path = segment_path(dir, last.id);
        let writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        sync_dir(dir)?;
        let states_path = dir.join("states.json");
        let acked_states = match fs::read(&states_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(io_err(&states_path)(e)),
        };
        Ok(Spool {
            dir: dir.to_owned(),
            max_bytes,
            segment_bytes,
            segments,
            cursor,
            writer,
            acked_states,
        })
    }

    /// Bytes written and not yet acknowledged.
    pub fn pending_bytes(&self) -> u64 {
        let total: u64 = self.segments.iter().map(|s| s.len).sum();
        total - self.cursor.offset
    }

    /// The first unacknowledged position.
    pub fn cursor(&self) -> Pos {
        self.cursor
    }

    /// The end of what was written.
    pub fn end(&self) -> Pos {
        let last = self.segments.back().expect("one segment");
        Pos {
            segment: last.id,
            offset: last.len,
        }
    }

    /// Writes an entry durably (fsync) or refuses it when the spool is full.
    pub fn append(&mut self, entry: &Entry) -> Result<(), SpoolError> {
        let payload = serde_json::to_vec(entry).expect("entries serialize");
        let frame_len = HEADER + payload.len() as u64;
        if self.pending_bytes() + frame_len > self.max_bytes {
            return Err(SpoolError::Full {
                pending: self.pending_bytes(),
                max: self.max_bytes,
                entry: frame_len,
            });
        }
        if self.segments.back().expect("one segment").len >= self.segment_bytes {
            self.roll()?;
        }
        let mut frame = Vec::with_capacity(frame_len as usize);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        let last = self.segments.back_mut().expect("one segment");
        let path = segment_path(&self.dir, last.id);
        let written = self
            .writer
            .write_all(&frame)
            .and_then(|()| self.writer.sync_data());
        if let Err(e) = written {
            // What part of the frame reached the file goes: the entry was not spooled, and the
            // caller counts it so; left there, it would read as a torn frame before the next
            // whole one, and a restart would cut both off.
            cut_to(&path, last.len)?;
            return Err(io_err(&path)(e));
        }
        last.len += frame_len;
        Ok(())
    }

    fn roll(&mut self) -> Result<(), SpoolError> {
        let id = self.segments.back().expect("one segment").id + 1;
        let path = segment_path(&self.dir, id);
        self.writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        sync_dir(&self.dir)?;
        self.segments.push_back(Segment { id, len: 0 });
        Ok(())
    }

    /// Reads up to `max_entries` entries from `from` on, each with the position after it.
    pub fn read(&self, from: Pos, max_entries: usize) -> Result<Vec<(Pos, Entry)>, SpoolError> {
        let mut out = Vec::new();
        for seg in self.segments.iter().filter(|s| s.id >= from.segment) {
            let mut offset = if seg.id == from.segment {
                from.offset
            } else {
                0
            };
            if offset >= seg.len {
                continue;
            }
            let path = segment_path(&self.dir, seg.id);
            let mut f = File::open(&path).map_err(io_err(&path))?;
            f.seek(SeekFrom::Start(offset)).map_err(io_err(&path))?;
            let mut rest = vec![0; (seg.len - offset) as usize];
            f.read_exact(&mut rest).map_err(io_err(&path))?;
            let mut at = 0usize;
            while at < rest.len() && out.len() < max_entries {
                let here = Pos {
                    segment: seg.id,
                    offset,
                };
                let (entry, used) = decode(&rest[at..])
                    .map_err(|reason| SpoolError::Corrupt { at: here, reason })?;
                at += used;
                offset += used as u64;
                out.push((
                    Pos {
                        segment: seg.id,
                        offset,
                    },
                    entry,
                ));
            }
            if out.len() >= max_entries {
                break;
            }
        }
        Ok(out)
    }

    /// Marks everything before `upto` acknowledged: records the states those entries carried,
    /// moves the cursor durably, and deletes the segments it has passed.
    pub fn ack(&mut self, upto: Pos, states: &[SourceState]) -> Result<(), SpoolError> {
        if !states.is_empty() {
            for s in states {
                self.acked_states.insert(s.source.clone(), s.value.clone());
            }
            let path = self.dir.join("states.json");
            write_atomic(
                &self.dir,
                &path,
                &serde_json::to_vec(&self.acked_states).expect("states serialize"),
            )?;
        }
        let mut cursor = upto;
        // A fully read segment that is not the one being written: move past it.
        while let Some(seg) = self.segments.iter().find(|s| s.id == cursor.segment) {
            let is_last = seg.id == self.segments.back().expect("one segment").id;
            if cursor.offset >= seg.len && !is_last {
                cursor = Pos {
                    segment: seg.id + 1,
                    offset: 0,
                };
            } else {
                break;
            }
        }
        let path = self.dir.join("cursor");
        write_atomic(
            &self.dir,
            &path,
            format!("{} {}\n", cursor.segment, cursor.offset).as_bytes(),
        )?;
        self.cursor = cursor;
        while self.segments.front().is_some_and(|s| s.id < cursor.segment) {
            let seg = self.segments.pop_front().expect("front");
            let path = segment_path(&self.dir, seg.id);
            fs::remove_file(&path).map_err(io_err(&path))?;
        }
        Ok(())
    }

    /// Each source's latest state: acknowledged ones, overridden by those still pending.
    pub fn states(&self) -> Result<BTreeMap<String, serde_json::Value>, SpoolError> {
        let mut states = self.acked_states.clone();
        let mut from = self.cursor;
        loop {
            let chunk = self.read(from, 1024)?;
            let Some((last, _)) = chunk.last() else {
                break;
            };
            from = *last;
            for (_, e) in chunk {
                if let Some(s) = e.state {
                    states.insert(s.source, s.value);
                }
            }
        }
        Ok(states)
    }
}

fn decode(buf: &[u8]) -> Result<(Entry, usize), FrameError> {
    if buf.len() < HEADER as usize {
        return Err(FrameError::TruncatedHeader);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len > MAX_FRAME || buf.len() < HEADER as usize + len as usize {
        return Err(FrameError::TooLong(len));
    }
    let payload = &buf[HEADER as usize..HEADER as usize + len as usize];
    if crc32fast::hash(payload) != crc {
        return Err(FrameError::Checksum);
    }
    let entry = serde_json::from_slice(payload).map_err(FrameError::NotAnEntry)?;
    Ok((entry, HEADER as usize + len as usize))
}

/// The length of the run of whole, valid frames at the start of a segment.
fn valid_prefix(path: &Path) -> Result<u64, SpoolError> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    let mut at = 0usize;
    while at < bytes.len() {
        match decode(&bytes[at..]) {
            Ok((_, used)) => at += used,
            Err(_) => break,
        }
    }
    Ok(at as u64)
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.seg"))
}

fn read_cursor(dir: &Path) -> Result<Option<Pos>, SpoolError> {
    let path = dir.join("cursor");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(segment)), Some(Ok(offset))) => Ok(Some(Pos { segment, offset })),
        _ => Err(SpoolError::Cursor { path }),
    }
}

fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Sample;
    use chrono::DateTime;
    use proptest::prelude::*;

    fn entry(n: i64) -> Entry {
        Entry {
            batch: Batch::Samples(vec![Sample {
                meter: "g0".into(),
                ts: DateTime::from_timestamp(n, 0).unwrap(),
                counter_mj: Some(n),
                power_w: None,
                peak_w: None,
                step_s: None,
                counter_estimated: false,
            }]),
            state: None,
        }
    }

    fn counter(e: &Entry) -> i64 {
        match &e.batch {
            Batch::Samples(s) => s[0].counter_mj.unwrap(),
            _ => panic!(),
        }
    }

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "wl-spool-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn pending(s: &Spool) -> Vec<i64> {
        s.read(s.cursor(), usize::MAX)
            .unwrap()
            .iter()
            .map(|(_, e)| counter(e))
            .collect()
    }

    /// A full disk part-way through a frame: the append fails, its bytes are cut off, and the
    /// next append (space back) is read back after a restart with everything before it.
    #[test]
    fn a_failed_append_leaves_no_torn_frame_before_the_next_one() {
        let dir = tempdir("enospc");
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        s.append(&entry(1)).unwrap();
        let path = segment_path(&dir, s.segments.back().unwrap().id);
        // Half a frame reached the disk, then the write failed: a writer that cannot write
        // stands in for ENOSPC, the half frame is written beside it.
        let torn = OpenOptions::new().append(true).open(&path).unwrap();
        (&torn).write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let writer = std::mem::replace(&mut s.writer, File::open(&path).unwrap());
        assert!(matches!(s.append(&entry(2)), Err(SpoolError::Io { .. })));
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            s.segments.back().unwrap().len
        );
        s.writer = writer;
        s.append(&entry(3)).unwrap();
        drop(s);
        let s = Spool::open(&dir, 1 << 30).unwrap();
        assert_eq!(pending(&s), [1, 3]);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn entries_survive_reopen_and_acked_ones_are_gone() {
        let dir = tempdir("reopen");
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        for n in 0..10 {
            s.append(&entry(n)).unwrap();
        }
        let read = s.read(s.cursor(), 4).unwrap();
        s.ack(read.last().unwrap().0, &[]).unwrap();
        drop(s);
        let s = Spool::open(&dir, 1 << 30).unwrap();
        assert_eq!(pending(&s), (4..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_torn_last_frame_is_cut_off_and_appends_continue() {
        let dir = tempdir("torn");
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        s.append(&entry(1)).unwrap();
        s.append(&entry(2)).unwrap();
        let end = s.end();
        drop(s);
        // A crash halfway through writing entry 3.
        let path = segment_path(&dir, end.segment);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, b'{']).unwrap();
        drop(f);
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        assert_eq!(s.end(), end);
        s.append(&entry(3)).unwrap();
        assert_eq!(pending(&s), [1, 2, 3]);
    }

    #[test]
    fn a_full_spool_keeps_the_oldest_and_refuses_the_newest() {
        let dir = tempdir("full");
        let one = {
            let mut s = Spool::open(&tempdir("size"), 1 << 30).unwrap();
            s.append(&entry(1)).unwrap();
            s.pending_bytes()
        };
        let mut s = Spool::open(&dir, one * 3).unwrap();
        for n in 1..=3 {
            s.append(&entry(n)).unwrap();
        }
        assert!(matches!(s.append(&entry(4)), Err(SpoolError::Full { .. })));
        assert_eq!(pending(&s), [1, 2, 3]);
        let first = s.read(s.cursor(), 1).unwrap()[0].0;
        s.ack(first, &[]).unwrap();
        s.append(&entry(5)).unwrap();
        assert_eq!(pending(&s), [2, 3, 5]);
    }

    #[test]
    fn states_come_from_acked_then_pending_entries() {
        let dir = tempdir("states");
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        let with_state = |n: i64| Entry {
            state: Some(SourceState {
                source: "tokens".into(),
                value: serde_json::json!(n),
            }),
            ..entry(n)
        };
        s.append(&with_state(1)).unwrap();
        s.append(&with_state(2)).unwrap();
        let first = s.read(s.cursor(), 1).unwrap()[0].clone();
        s.ack(first.0, &[first.1.state.clone().unwrap()]).unwrap();
        drop(s);
        let mut s = Spool::open(&dir, 1 << 30).unwrap();
        assert_eq!(s.states().unwrap()["tokens"], serde_json::json!(2));
        let rest = s.read(s.cursor(), 10).unwrap();
        let states: Vec<_> = rest.iter().filter_map(|(_, e)| e.state.clone()).collect();
        s.ack(rest.last().unwrap().0, &states).unwrap();
        drop(s);
        let s = Spool::open(&dir, 1 << 30).unwrap();
        assert_eq!(s.states().unwrap()["tokens"], serde_json::json!(2));
        assert_eq!(s.pending_bytes(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any interleaving of appends, acks of a prefix and reopens delivers every entry
        /// exactly once and in order, across segment rolls.
        #[test]
        fn every_entry_once_in_order(ops in proptest::collection::vec((0u8..3, 1usize..40), 1..40)) {
            let dir = tempdir("prop");
            let open = |d: &Path| Spool::open_with_segments(d, 1 << 30, 700).unwrap();
            let mut s = open(&dir);
            let mut next = 0i64;
            let mut delivered = Vec::new();
            for (op, n) in ops {
                match op {
                    0 => for _ in 0..n {
                        s.append(&entry(next)).unwrap();
                        next += 1;
                    },
                    1 => {
                        let read = s.read(s.cursor(), n).unwrap();
                        if let Some((end, _)) = read.last() {
                            delivered.extend(read.iter().map(|(_, e)| counter(e)));
                            s.ack(*end, &[]).unwrap();
                        }
                    }
                    _ => {
                        drop(s);
                        s = open(&dir);
                    }
                }
            }
            delivered.extend(pending(&s));
            prop_assert_eq!(delivered, (0..next).collect::<Vec<_>>());
        }
    }
}
