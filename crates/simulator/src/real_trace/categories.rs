//! What each category of a real fault trace means to unicron: the failure
//! kind a training job would see, or that a site's own check found it.

use unicron_core::FailureKind;

/// Who finds a fault of a category first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// The job running on the node: it shows as this kind (a log line, a
    /// crash, a lost node).
    Job(FailureKind),
    /// The site's own checks (a stress test, a BMC sensor, a degraded link
    /// or an error counter found by monitoring): nothing a job shows.
    Check,
}

/// The InfiniteHBD trace's categories, `(Class, Desc)`, and who finds them.
/// Every category of the shipped trace is here (a test holds it to that);
/// the reasons are in docs/EVALUATION.md, "A real fault trace".
pub const INFINITEHBD: [(&str, &str, FoundBy); 39] = {
    use FailureKind::*;
    use FoundBy::{Check, Job};
    [
        // GPU: uncorrectable errors, Xids and lost devices crash or stall
        // the job; degraded links and heat only slow it, found by checks.
        ("GPU", "GPU DBE(Double Bit ECC) > Threshold", Job(EccError)),
        ("GPU", "GPU SBE(Single Bit ECC) > Threshold", Check),
        ("GPU", "GPU xid Error", Job(GpuDriverError)),
        ("GPU", "GPU device unknow error", Job(GpuDriverError)),
        ("GPU", "GPU Lost", Job(GpuDriverError)),
        ("GPU", "GPU device not found", Job(GpuDriverError)),
        ("GPU", "nvidia-smi Timeout", Job(TaskHang)),
        ("GPU", "GPU PCI link width low", Check),
        ("GPU", "GPU P2P Bandwidth Low", Check),
        ("GPU", "GPU Temperature High", Check),
        ("GPU", "Silent Data Corruption", Check),
        // The scale-out network: a link or NIC that goes away breaks the
        // collectives; one that runs slow is found by checks.
        ("Parameter Plane Cable", "Link Down", Job(LinkFlapping)),
        ("NIC", "Rnic Gid Error", Job(NetworkError)),
        ("NIC", "NIC Lost", Job(NetworkError)),
        ("NIC", "NIC Link Speed low", Check),
        ("NIC", "NIC PCI link Width low", Check),
        ("Change", "Remote Optical Module Failure", Job(LinkFlapping)),
        // The server itself: it goes dark.
        (
            "Power Supply",
            "Power Supply Failure detected",
            Job(LostConnection),
        ),
        ("Motherboard", "Motherboard Failed", Job(LostConnection)),
        (
            "CPU",
            "Machine Check Exception ( Uncorrectable )",
            Job(LostConnection),
        ),
        ("Operating System", "Kernel Panic", Job(LostConnection)),
        ("System Crash", "Server down", Job(LostConnection)),
        (
            "Training Task Troubleshooting",
            "Suspect Machine Offline",
            Job(LostConnection),
        ),
        // The PCIe riser carries GPUs and NICs: they fall off the bus.
        ("Riser Card", "RiserCard Fault", Job(GpuDriverError)),
        // Redundant parts, sensors and configuration: the server runs on.
        ("Power Supply", "Redundancy Lost", Check),
        ("Fan", "Speed Critical (Sensor)", Check),
        ("Fan", "Redundancy Lost", Check),
        ("Motherboard Battery", "Low", Check),
        ("CPU", "Configuration Error", Check),
        ("RAID Card", "Bus Correctable error", Check),
        ("Firmware", "Firmware mismatch", Check),
        ("Software Tool", "Kubelet Date Absent", Check),
        // Taken out by the site: a failed stress test, a change, a test.
        ("Stress Test Failure", "Unknown Error", Check),
        ("Change", "Y-cables Taken offline", Check),
        ("Test", "Temporarily Offline", Check),
        // Errors with no name: the job's processes die with no line a rule
        // knows (the file system's errors end the job's I/O the same way).
        ("Unknown Error", "Unknown Error", Job(ExitedAbnormally)),
        ("Other Failures", "Unknown Error", Job(ExitedAbnormally)),
        (
            "File System",
            "FS: Multiple Disk FS Error",
            Job(ExitedAbnormally),
        ),
        ("File System", "FS Readonly", Job(ExitedAbnormally)),
    ]
};

/// Who finds a fault of category `(class, desc)`; `None` for one the
/// table does not know.
pub fn found_by(class: &str, desc: &str) -> Option<FoundBy> {
    INFINITEHBD
        .iter()
        .find(|(c, d, _)| *c == class && *d == desc)
        .map(|(_, _, f)| *f)
}

/// How an evaluation reads faults its table says a site's checks found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// Every fault hits the job on its node: a check-found one as the node
    /// taken from under the job (`lost_connection`). The pessimistic reading.
    EveryFaultHitsAJob,
    /// Check-found faults take out nodes no job is using (a stress test
    /// after a repair, a drained node): they cost no job time and are left
    /// out. Job-found ones hit as in the other reading.
    ChecksFindTheirOwn,
}

impl Reading {
    /// The kind a fault found by `found` hits its job as, or `None` when it
    /// hits none in this reading.
    pub fn hits_as(self, found: FoundBy) -> Option<FailureKind> {
        match (found, self) {
            (FoundBy::Job(kind), _) => Some(kind),
            (FoundBy::Check, Reading::EveryFaultHitsAJob) => Some(FailureKind::LostConnection),
            (FoundBy::Check, Reading::ChecksFindTheirOwn) => None,
        }
    }
}
