//! GPU meter keys: the templates a GPU's and a MIG instance's meter key is written from
//! (`{node}-gpu{index}`, `{node}-gpu{index}-mig{gi}`) and their expansion.
//!
//! The GPU sources (`dcgm`, `nvml`) register meters under these keys and the scheduler source
//! (`slurm`) names the same keys in its jobs' allocations, so the templates and their
//! expansion live here, beside the sources, where each of them reaches them without the agent.

/// The default key of a GPU's meter.
pub(crate) fn default_gpu_meter() -> String {
    "{node}-gpu{index}".into()
}

/// The default key of a MIG instance's meter.
pub(crate) fn default_mig_meter() -> String {
    "{node}-gpu{index}-mig{gi}".into()
}

/// The default key of a partitioned AMD board's meter (its partitions keep the GPU keys of
/// their indices; see `amd_board`).
pub(crate) fn default_socket_meter() -> String {
    "{node}-socket{index}".into()
}

/// Expands `{node}`, `{index}`, `{uuid}`, `{gi}` in a meter-key template.
pub fn meter_key(template: &str, node: &str, index: u32, uuid: &str, gi: Option<u32>) -> String {
    template
        .replace("{node}", node)
        .replace("{index}", &index.to_string())
        .replace("{uuid}", uuid)
        .replace("{gi}", &gi.map(|g| g.to_string()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_key_templates() {
        assert_eq!(
            meter_key("{node}-gpu{index}", "n1", 3, "GPU-x", None),
            "n1-gpu3"
        );
        assert_eq!(
            meter_key("{node}-gpu{index}-mig{gi}", "n1", 0, "GPU-x", Some(2)),
            "n1-gpu0-mig2"
        );
        assert_eq!(meter_key("{uuid}", "n1", 0, "GPU-x", None), "GPU-x");
        assert_eq!(
            meter_key(&default_mig_meter(), "n1", 1, "MIG-y", Some(0)),
            "n1-gpu1-mig0"
        );
    }
}
