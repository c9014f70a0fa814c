//! AMD GPU boards and their partitions as meters, for the AMD sources (`amdsmi`,
//! `amd_exporter`).
//!
//! An MI300-class board can be split into compute partitions (DPX, QPX, CPX): each is a
//! logical GPU of its own to the scheduler (its own index, `ROCR_VISIBLE_DEVICES` entry,
//! Slurm GRES and Kubernetes device), but the board has one power sensor and one energy
//! accumulator, and only partition 0 reports them: the others read `N/A` (amd-smi) or 0 W
//! and no energy (the device metrics exporter; its docs: "no per-XCD power sensor"). So
//! reading each partition as a GPU of its own would charge partition 0's jobs for the whole
//! board and the others' jobs for nothing.
//!
//! Instead a partitioned board is metered once, as a `gpu` meter (its "socket"), with its
//! partitions as child meters (kind `mig`, the server's one kind of GPU slice) that take
//! allocations and no samples. The server then splits the board's energy over the
//! allocations on its partitions by their shares, as it does for MIG instances. The
//! partitions keep the keys a whole GPU of their index would have (`{node}-gpu{index}`), so
//! a scheduler that names GPUs by index names the partition its job ran on.

use crate::records::Meter;
use crate::sources::gpu_meter::meter_key;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use wattledger_domain::meter_kind::MeterKind;

/// A logical GPU as a source reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logical {
    /// amd-smi's `gpu`, the exporter's `gpu_id`: the index the scheduler uses.
    pub index: u32,
    /// What names its physical board (its PCI domain:bus:device, its serial number); `None`
    /// where nothing does, and the GPU is taken as a board of its own.
    pub board: Option<String>,
    pub partition: Option<u32>,
    /// The compute partition mode (`spx`, `dpx`, `qpx`, `cpx`), where the source says.
    pub mode: Option<String>,
    pub uuid: Option<String>,
    pub model: Option<String>,
}

impl Logical {
    /// Whether its board is split, as far as this GPU alone says.
    fn says_partitioned(&self) -> bool {
        self.partition.is_some_and(|p| p > 0)
            || self
                .mode
                .as_deref()
                .is_some_and(|m| !matches!(m, "spx" | "none" | "na" | ""))
    }
}

/// A physical board and, when it is partitioned, its partitions (logical GPUs), partition 0
/// first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Board {
    /// The logical GPU that reports the board's power and energy: partition 0, or the GPU
    /// itself on an unpartitioned board.
    pub primary: Logical,
    /// Empty for an unpartitioned board.
    pub partitions: Vec<Logical>,
}

/// The meter-key templates of the AMD sources.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    pub node: &'a str,
    /// An unpartitioned GPU: `{index}`, `{uuid}`.
    pub gpu: &'a str,
    /// A partitioned board: `{index}` is its partition 0's index.
    pub socket: &'a str,
    /// A partition: `{index}` its own index, `{gi}` its partition id.
    pub partition: &'a str,
}

impl Board {
    /// The meter its energy and power are sent to.
    pub fn key(&self, k: Keys) -> String {
        let p = &self.primary;
        let template = if self.partitions.is_empty() {
            k.gpu
        } else {
            k.socket
        };
        meter_key(template, k.node, p.index, uuid(p), None)
    }

    /// The key of one of its partitions.
    pub fn partition_key(p: &Logical, k: Keys) -> String {
        meter_key(k.partition, k.node, p.index, uuid(p), p.partition)
    }

    /// Its meters: the board under the node, then its partitions under the board.
    pub fn meters(&self, site: &str, k: Keys) -> Vec<Meter> {
        let key = self.key(k);
        // A UUID names the logical GPU a scheduler allocates: on a partitioned board that is
        // partition 0, which carries it; the board's meter carries none (one UUID, one meter).
        let mut out = vec![Meter {
            gpu_uuid: (self.partitions.is_empty())
                .then(|| self.primary.uuid.clone())
                .flatten(),
            device_model: self.primary.model.clone(),
            ..Meter::new(&key, site, MeterKind::Gpu, Some(k.node))
        }];
        out.extend(self.partitions.iter().map(|p| Meter {
            gpu_uuid: p.uuid.clone(),
            device_model: p.model.clone(),
            mig_profile: p.mode.clone(),
            ..Meter::new(
                &Board::partition_key(p, k),
                site,
                MeterKind::Mig,
                Some(&key),
            )
        }));
        out
    }

    /// A partition's share of its board when nothing else is known: 1/N of the N partitions
    /// seen (DPX, QPX and CPX split a board evenly), to the millionth the server keeps.
    pub fn partition_share(&self) -> Option<Decimal> {
        let n = u32::try_from(self.partitions.len())
            .ok()
            .filter(|&n| n > 1)?;
        Some((Decimal::ONE / Decimal::from(n)).round_dp(6))
    }
}

fn uuid(l: &Logical) -> &str {
    l.uuid.as_deref().unwrap_or_default()
}

/// Groups logical GPUs into boards: those naming the same board are its partitions, ordered
/// by partition id (then index); the one with partition id 0 (or else the first) reports for
/// the board. A board seen through one logical GPU is partitioned only if that GPU says so
/// (a partition id above 0 or a partition mode other than SPX): an exporter that lists only
/// partition 0 (ROCm/device-metrics-exporter#495) still gets a socket meter above it.
pub fn boards(logical: &[Logical]) -> Vec<Board> {
    let mut grouped: BTreeMap<String, Vec<&Logical>> = BTreeMap::new();
    let mut out = Vec::new();
    for l in logical {
        match &l.board {
            Some(b) => grouped.entry(b.clone()).or_default().push(l),
            None => out.push(vec![l]),
        }
    }
    out.extend(grouped.into_values());
    let mut boards: Vec<Board> = out
        .into_iter()
        .map(|mut members| {
            members.sort_by_key(|l| (l.partition.unwrap_or(u32::MAX), l.index));
            let primary = members[0].clone();
            let partitioned = members.len() > 1 || primary.says_partitioned();
            Board {
                primary,
                partitions: if partitioned {
                    members.into_iter().cloned().collect()
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    boards.sort_by_key(|b| b.primary.index);
    boards
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: Keys = Keys {
        node: "n1",
        gpu: "{node}-gpu{index}",
        socket: "{node}-socket{index}",
        partition: "{node}-gpu{index}",
    };

    fn gpu(index: u32, board: Option<&str>, partition: Option<u32>, mode: &str) -> Logical {
        Logical {
            index,
            board: board.map(str::to_owned),
            partition,
            mode: (!mode.is_empty()).then(|| mode.to_owned()),
            uuid: None,
            model: Some("AMD Instinct MI300X".into()),
        }
    }

    /// Two boards: one in SPX, one in CPX (eight partitions, indices 1–8), listed out of
    /// order.
    #[test]
    fn a_partitioned_board_is_one_meter_with_its_partitions_under_it() {
        let mut logical = vec![gpu(0, Some("0000:0c"), Some(0), "spx")];
        for p in (0..8).rev() {
            logical.push(Logical {
                uuid: Some(format!("uuid-{p}")),
                ..gpu(1 + p, Some("0000:22"), Some(p), "cpx")
            });
        }
        let b = boards(&logical);
        assert_eq!(b.len(), 2);
        assert!(b[0].partitions.is_empty());
        assert_eq!(b[0].key(KEYS), "n1-gpu0");
        assert_eq!(b[1].primary.index, 1);
        assert_eq!(b[1].key(KEYS), "n1-socket1");
        let m = b[1].meters("fra1", KEYS);
        assert_eq!(m.len(), 9);
        assert_eq!(
            (m[0].kind, m[0].parent.as_deref()),
            (MeterKind::Gpu, Some("n1"))
        );
        assert_eq!(
            (m[8].key.as_str(), m[8].kind, m[8].parent.as_deref()),
            ("n1-gpu8", MeterKind::Mig, Some("n1-socket1"))
        );
        assert_eq!(m[8].mig_profile.as_deref(), Some("cpx"));
        // Each UUID on one meter: partition 0's on partition 0, none on the board.
        assert_eq!(m[0].gpu_uuid, None);
        assert_eq!(
            (m[1].key.as_str(), m[1].gpu_uuid.as_deref()),
            ("n1-gpu1", Some("uuid-0"))
        );
        assert_eq!(b[1].partition_share(), Some(Decimal::new(125_000, 6)));
        assert_eq!(b[0].partition_share(), None);
    }

    #[test]
    fn gpus_without_a_board_are_boards_of_their_own() {
        let b = boards(&[gpu(1, None, None, ""), gpu(0, None, None, "")]);
        assert_eq!(
            b.iter().map(|b| b.key(KEYS)).collect::<Vec<_>>(),
            ["n1-gpu0", "n1-gpu1"]
        );
        // An exporter that shows only partition 0 of a DPX board: still a socket.
        let b = boards(&[gpu(0, Some("692407005126"), Some(0), "dpx")]);
        assert_eq!(b[0].key(KEYS), "n1-socket0");
        assert_eq!(b[0].partitions.len(), 1);
        assert_eq!(
            b[0].partition_share(),
            None,
            "one partition seen: no even split to give"
        );
        // Three DPX partitions would be odd, but split evenly to the millionth.
        let three: Vec<_> = (0..3).map(|p| gpu(p, Some("x"), Some(p), "tpx")).collect();
        assert_eq!(
            boards(&three)[0].partition_share(),
            Some(Decimal::new(333_333, 6))
        );
    }
}
