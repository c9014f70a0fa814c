//! One module per source; each parses its wire format in a pure function.

pub mod cgroup;
pub mod dcgm;
pub mod podresources;
pub mod redfish;
pub mod slurm;
pub mod snmp;
pub mod tokens;
