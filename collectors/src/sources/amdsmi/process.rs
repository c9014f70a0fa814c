//! `amd-smi process --json` to the processes on each GPU, without running it. The pids are
//! mapped to jobs through `/proc/<pid>/cgroup` (`nvml::cgroup`), as for NVML.
//!
//! The shape, from amdsmi_commands.py (ROCm/amdsmi 0ceca28): per GPU, `process_list` is a
//! list of `{"process_info": {"name", "pid", "mem_usage", "usage", "memory_usage"}}`, or of
//! one `{"process_info": "No running processes detected"}` where there are none; the list is
//! bare or under `gpu_data` as for `metric`. Newer versions drop the `process_info` wrapper
//! in some outputs (`--sort-by-pid`, ROCm/rocm-systems#6396): a list entry that is itself
//! the process (has a `pid`) is read too.

use super::parse::AmdSmiError;
use serde_json::Value;

/// A process on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
}

/// Reads `amd-smi process --json`. An entry without a readable pid is left out: it names
/// no process (the "no processes" placeholder, or a pid amd-smi could not read).
pub fn processes(text: &str) -> Result<Vec<GpuProcess>, AmdSmiError> {
    let gpus: Value = serde_json::from_str(text)?;
    let list = match &gpus {
        Value::Array(l) => l,
        Value::Object(o) => o
            .get("gpu_data")
            .and_then(Value::as_array)
            .ok_or(AmdSmiError::Shape)?,
        _ => return Err(AmdSmiError::Shape),
    };
    let mut out = Vec::new();
    for (at, g) in list.iter().enumerate() {
        let gpu = g
            .get("gpu")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok())
            .ok_or(AmdSmiError::NoIndex { at })?;
        let Some(procs) = g.get("process_list").and_then(Value::as_array) else {
            continue;
        };
        for p in procs {
            let info = p.get("process_info").unwrap_or(p);
            if let Some(pid) = info
                .get("pid")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
            {
                out.push(GpuProcess { gpu, pid });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-made in the shape amdsmi_commands.py writes; the pid and memory are those of
    /// ROCm/amdsmi#130's text output (`amd-smi process` on a ROCm 6.4.0 node).
    #[test]
    fn processes_per_gpu_and_the_empty_placeholder() {
        let text = r#"[
            {"gpu": 0, "process_list": [{"process_info": {"name": "N/A", "pid": 2266127,
                "memory_usage": {"gtt_mem": {"value": 0, "unit": "B"}, "cpu_mem": {"value": 0, "unit": "B"},
                                 "vram_mem": {"value": 1900000000, "unit": "B"}},
                "mem_usage": {"value": 0, "unit": "B"},
                "usage": {"gfx": {"value": 0, "unit": "ns"}, "enc": {"value": 0, "unit": "ns"}}}}]},
            {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]}
        ]"#;
        assert_eq!(
            processes(text).unwrap(),
            [GpuProcess {
                gpu: 0,
                pid: 2_266_127
            }]
        );
    }

    #[test]
    fn unwrapped_entries_and_the_envelope() {
        let text =
            r#"{"gpu_data": [{"gpu": 3, "process_list": [{"name": "python3", "pid": 77}]}]}"#;
        assert_eq!(processes(text).unwrap(), [GpuProcess { gpu: 3, pid: 77 }]);
        assert!(matches!(
            processes("[{\"process_list\": []}]"),
            Err(AmdSmiError::NoIndex { at: 0 })
        ));
        assert!(matches!(processes("7"), Err(AmdSmiError::Shape)));
    }
}
