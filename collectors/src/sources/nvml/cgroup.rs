//! `/proc/<pid>/cgroup` to the job a GPU process belongs to.
//!
//! NVML lists the processes on a GPU by pid; the scheduler is found in the process's cgroup
//! path. Slurm's cgroup plugins put tasks under `.../job_<id>/step_<n>/...` (v1 and v2);
//! Kubernetes puts containers under a pod slice named by the pod UID, with `-` in the UID
//! written as `_` under the systemd driver (`kubepods-burstable-pod<uid>.slice`) and kept
//! under the cgroupfs driver (`/kubepods/burstable/pod<uid>/...`).

/// What a process's cgroup says about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    SlurmJob(u64),
    /// Kubernetes pod UID, canonical (with dashes).
    Pod(String),
}

/// Reads the contents of `/proc/<pid>/cgroup` (v1 lines `id:controllers:path` or the v2
/// line `0::path`) and returns the first owner found.
pub fn owner(cgroup_file: &str) -> Option<Owner> {
    cgroup_file
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(owner_of_path)
}

fn owner_of_path(path: &str) -> Option<Owner> {
    for part in path.split('/') {
        if let Some(id) = part.strip_prefix("job_") {
            if let Ok(id) = id.parse() {
                return Some(Owner::SlurmJob(id));
            }
        }
        // systemd driver: kubepods-besteffort-pod<uid>.slice; cgroupfs: pod<uid>
        let pod = part
            .strip_suffix(".slice")
            .and_then(|p| p.rsplit('-').next())
            .and_then(|p| p.strip_prefix("pod"))
            .or_else(|| part.strip_prefix("pod"));
        if let Some(uid) = pod {
            let uid = uid.replace('_', "-");
            if uid.len() == 36 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Some(Owner::Pod(uid));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_v1_and_v2() {
        let v1 = "12:devices:/slurm/uid_1000/job_4242/step_0\n11:memory:/slurm/uid_1000/job_4242/step_0\n";
        assert_eq!(owner(v1), Some(Owner::SlurmJob(4242)));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(owner(v2), Some(Owner::SlurmJob(77)));
    }

    #[test]
    fn kubernetes_systemd_and_cgroupfs_drivers() {
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b2a5c1e_3f4d_4e5a_9b8c_0d1e2f3a4b5c.slice/cri-containerd-abc.scope\n";
        assert_eq!(
            owner(systemd),
            Some(Owner::Pod("6b2a5c1e-3f4d-4e5a-9b8c-0d1e2f3a4b5c".into()))
        );
        let cgroupfs =
            "5:memory:/kubepods/besteffort/pod6b2a5c1e-3f4d-4e5a-9b8c-0d1e2f3a4b5c/0123abc\n";
        assert_eq!(
            owner(cgroupfs),
            Some(Owner::Pod("6b2a5c1e-3f4d-4e5a-9b8c-0d1e2f3a4b5c".into()))
        );
    }

    #[test]
    fn other_processes_have_no_owner() {
        assert_eq!(
            owner("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(owner("0::/system.slice/podman.service\n"), None);
        assert_eq!(owner(""), None);
    }
}
