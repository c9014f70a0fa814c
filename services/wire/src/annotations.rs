//! The annotations schedulers put on Kubernetes objects for wattledger: the pod webhook reads
//! them on pods, the Kueue controller on Workloads (and their pod templates). One list, so the
//! two cannot spell a name differently. The run time's grammar is `parse_duration`.

pub const TENANT: &str = "wattledger.io/tenant";
pub const DURATION: &str = "wattledger.io/duration";
pub const DEADLINE: &str = "wattledger.io/deadline";
pub const KIND: &str = "wattledger.io/kind";
pub const MODEL: &str = "wattledger.io/model";
pub const GPU_MODEL: &str = "wattledger.io/gpu-model";
pub const SITES: &str = "wattledger.io/sites";
/// Set by wattledger on a pod (or every pod set of a Workload) admitted only with its GPUs
/// capped: the power limit per GPU, W, for the node to apply before the containers start.
pub const POWER_CAP: &str = "wattledger.io/power-cap-w";
