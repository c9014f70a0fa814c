//! The registry of sources: every kind of source the agent's TOML can configure, as the
//! name of its `[[<table>]]` and its config type. A new source is its folder under
//! `sources/` and one line here.
//!
//! The list is handed to a macro of the caller's (`with_sources!(callback)`) rather than
//! expanded here, because the struct it becomes is the agent's whole TOML (`agent::config`):
//! that struct also holds the `[agent]` section, which is the agent's, not the sources'.

/// Calls `$then!` with one `table: Type,` entry per kind of source, each with its doc
/// comment, in the order the agent builds and lists them.
macro_rules! with_sources {
    ($then:ident) => {
        $then! {
            /// GPUs through NVML on this node.
            nvml: $crate::sources::nvml::NvmlConfig,
            /// GPUs through a dcgm-exporter.
            dcgm: $crate::sources::dcgm::DcgmConfig,
            /// AMD GPUs through `amd-smi` on this node.
            amdsmi: $crate::sources::amdsmi::AmdSmiConfig,
            /// AMD GPUs through AMD's device metrics exporter.
            amd_exporter: $crate::sources::amd_exporter::AmdExporterConfig,
            /// Inference servers' token counters.
            tokens: $crate::sources::tokens::TokensConfig,
            /// Redfish rack PDUs.
            redfish: $crate::sources::redfish::RedfishConfig,
            /// SNMP rack PDUs.
            snmp: $crate::sources::snmp::SnmpConfig,
            /// Prometheus exporters a site runs (snmp_exporter, ipmi_exporter).
            exporter: $crate::sources::exporter::ExporterConfig,
            /// Slurm accounting.
            slurm: $crate::sources::slurm::SlurmConfig,
            /// The kubelet's pod resources.
            podresources: $crate::sources::podresources::PodResourcesConfig,
            /// Grid carbon intensity and prices.
            grid: $crate::sources::grid::GridConfig,
        }
    };
}

pub(crate) use with_sources;
