//! Hardware faults that quarantine a GPU: an XID error of the hardware kind
//! (NVIDIA's XID catalogue: memory, bus and NVLink failures, not
//! application faults) or a rising uncorrectable ECC count, seen between
//! two samples of the same GPU.

use crate::model::GpuSample;

/// XIDs that mean the hardware (not a program) failed, with what they mean.
pub const HARDWARE_XIDS: [(u32, &str); 11] = [
    (48, "double-bit ECC error"),
    (63, "ECC page retirement or row remapping"),
    (64, "ECC page retirement or row remapping failure"),
    (74, "NVLink error"),
    (79, "GPU has fallen off the bus"),
    (92, "high single-bit ECC error rate"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
    (140, "unrecovered ECC error"),
];

/// What the XID means, when it is one of the hardware kind.
pub fn hardware_xid(xid: u32) -> Option<&'static str> {
    HARDWARE_XIDS
        .iter()
        .find(|(code, _)| *code == xid)
        .map(|(_, what)| *what)
}

/// Why `new` quarantines its GPU, given the sample before it: the XID
/// count rose and the newest XID is of the hardware kind, or the
/// uncorrectable ECC count rose. A first sample (no `previous`) sets the
/// baseline: counts the agent carried over (a coordinator restart) are not
/// taken for new faults.
pub fn quarantine_reason(previous: Option<&GpuSample>, new: &GpuSample) -> Option<String> {
    let previous = previous?;
    let rose = |before: Option<u64>, now: Option<u64>| match (before, now) {
        (Some(b), Some(n)) => n > b,
        _ => false,
    };
    if rose(previous.xid_errors, new.xid_errors) {
        if let Some((xid, what)) = new.last_xid.and_then(|x| hardware_xid(x).map(|w| (x, w))) {
            return Some(format!("XID {xid} ({what})"));
        }
    }
    if rose(previous.ecc_errors_uncorrected, new.ecc_errors_uncorrected) {
        return Some(format!(
            "uncorrectable ECC errors rose from {} to {}",
            previous.ecc_errors_uncorrected.unwrap_or(0),
            new.ecc_errors_uncorrected.unwrap_or(0)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(xids: u64, last: Option<u32>, ecc: u64) -> GpuSample {
        GpuSample {
            xid_errors: Some(xids),
            last_xid: last,
            ecc_errors_uncorrected: Some(ecc),
            ..Default::default()
        }
    }

    #[test]
    fn hardware_xids_and_rising_ecc_quarantine_others_do_not() {
        let quiet = sample(0, None, 0);
        assert_eq!(
            quarantine_reason(Some(&quiet), &sample(1, Some(79), 0)).as_deref(),
            Some("XID 79 (GPU has fallen off the bus)")
        );
        // XID 13 (a graphics engine exception) and 31 (a page fault) are a
        // program's doing: an alert, not a quarantine.
        assert_eq!(
            quarantine_reason(Some(&quiet), &sample(1, Some(13), 0)),
            None
        );
        assert_eq!(
            quarantine_reason(Some(&quiet), &sample(1, Some(31), 0)),
            None
        );
        assert_eq!(
            quarantine_reason(Some(&sample(0, None, 2)), &sample(0, None, 3)).as_deref(),
            Some("uncorrectable ECC errors rose from 2 to 3")
        );
        // No rise, or no baseline yet: nothing.
        assert_eq!(
            quarantine_reason(Some(&sample(1, Some(79), 3)), &sample(1, Some(79), 3)),
            None
        );
        assert_eq!(quarantine_reason(None, &sample(5, Some(79), 9)), None);
        // A device that cannot count reports nothing.
        let blind = GpuSample::default();
        assert_eq!(
            quarantine_reason(Some(&blind), &sample(1, Some(79), 0)),
            None
        );
    }
}
