//! Ed25519 command signatures (docs/design.md §4, Security). The planner signs the
//! canonical bytes of a command; executors verify them before acting.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

use crate::records::Command;

/// The bytes a signature covers: every field but the signature itself,
/// each length-prefixed, so no two different commands share them.
pub fn canonical_bytes(command: &Command) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut field = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    field(b"unicron.command.v1");
    field(command.id.as_bytes());
    field(command.cluster.as_bytes());
    field(command.decision_id.as_bytes());
    field(&command.time_ms.to_be_bytes());
    field(format!("{:?}", command.action).as_bytes());
    field(command.job.as_deref().unwrap_or("\u{0}").as_bytes());
    field(&(command.nodes.len() as u64).to_be_bytes());
    for node in &command.nodes {
        field(node.as_bytes());
    }
    field(
        command
            .restore_from
            .as_deref()
            .unwrap_or("\u{0}")
            .as_bytes(),
    );
    field(&(command.causation.len() as u64).to_be_bytes());
    for cause in &command.causation {
        field(cause.as_bytes());
    }
    field(command.key_id.as_bytes());
    // Appended only when present, so commands without one keep the bytes
    // (and signatures) they had before the field existed.
    if let Some(rendezvous) = &command.rendezvous {
        field(b"rendezvous");
        field(&rendezvous.generation.to_be_bytes());
        field(rendezvous.master_addr.as_bytes());
        field(&rendezvous.master_port.to_be_bytes());
    }
    if let Some(plan) = &command.snapshots {
        field(b"snapshots");
        match plan.step {
            Some(step) => field(&step.to_be_bytes()),
            None => field(b"\0"),
        }
        field(plan.reason.as_bytes());
        field(&(plan.sources.len() as u64).to_be_bytes());
        for s in &plan.sources {
            field(&s.rank.to_be_bytes());
            field(&s.from_rank.to_be_bytes());
            field(s.node.as_bytes());
        }
        field(&(plan.replica_holders.len() as u64).to_be_bytes());
        for holder in &plan.replica_holders {
            field(holder.as_bytes());
        }
        field(&(plan.peers.len() as u64).to_be_bytes());
        for peer in &plan.peers {
            field(peer.node.as_bytes());
            field(peer.address.as_bytes());
        }
        // Only when set, so commands signed before the interval existed
        // still verify.
        if plan.interval_steps != 0 || !plan.interval_reason.is_empty() {
            field(b"interval");
            field(&plan.interval_steps.to_be_bytes());
            field(plan.interval_reason.as_bytes());
        }
    }
    out
}

/// A signing key with the id executors know it by.
#[derive(Clone)]
pub struct CommandSigner {
    pub key_id: String,
    key: SigningKey,
}

impl std::fmt::Debug for CommandSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandSigner")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl CommandSigner {
    /// From a 32-byte Ed25519 seed.
    pub fn from_seed(key_id: impl Into<String>, seed: [u8; 32]) -> CommandSigner {
        CommandSigner {
            key_id: key_id.into(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key executors verify with.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// Sets `key_id` and `signature`. Ed25519 is deterministic, so the same
    /// command always gets the same signature (replay compares them).
    pub fn sign(&self, command: &mut Command) {
        command.key_id = self.key_id.clone();
        command.signature = self.key.sign(&canonical_bytes(command)).to_bytes().to_vec();
    }
}

/// Why a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("unknown key id `{0}`")]
    UnknownKey(String),
    #[error("malformed signature")]
    Malformed,
    #[error("signature does not match the command")]
    Mismatch,
}

/// Checks `command` against the public key named by its `key_id`.
pub fn verify(
    command: &Command,
    key_for: impl Fn(&str) -> Option<VerifyingKey>,
) -> Result<(), SignatureError> {
    let key = key_for(&command.key_id)
        .ok_or_else(|| SignatureError::UnknownKey(command.key_id.clone()))?;
    let bytes: [u8; 64] = command
        .signature
        .as_slice()
        .try_into()
        .map_err(|_| SignatureError::Malformed)?;
    key.verify(&canonical_bytes(command), &Signature::from_bytes(&bytes))
        .map_err(|_| SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::CommandAction;

    fn command() -> Command {
        Command {
            id: "c1".into(),
            cluster: "a".into(),
            decision_id: "d1".into(),
            time_ms: 5,
            action: CommandAction::Restart,
            job: Some("j".into()),
            nodes: vec!["n1".into()],
            restore_from: Some("checkpoint".into()),
            causation: vec!["f1".into()],
            key_id: String::new(),
            signature: vec![],
            rendezvous: None,
            snapshots: None,
        }
    }

    #[test]
    fn signed_commands_verify_and_tampering_is_caught() {
        let signer = CommandSigner::from_seed("k1", [7; 32]);
        let public = signer.verifying_key();
        let keys = |id: &str| (id == "k1").then_some(public);
        let mut c = command();
        signer.sign(&mut c);
        assert_eq!(verify(&c, keys), Ok(()));

        let mut other_cluster = c.clone();
        other_cluster.cluster = "b".into();
        assert_eq!(verify(&other_cluster, keys), Err(SignatureError::Mismatch));
        let mut moved = c.clone();
        moved.nodes = vec!["n2".into()];
        assert_eq!(verify(&moved, keys), Err(SignatureError::Mismatch));
        let mut unknown = c.clone();
        unknown.key_id = "k0".into();
        assert_eq!(
            verify(&unknown, keys),
            Err(SignatureError::UnknownKey("k0".into()))
        );
        let mut unsigned = command();
        unsigned.key_id = "k1".into();
        assert_eq!(verify(&unsigned, keys), Err(SignatureError::Malformed));
    }

    #[test]
    fn the_restore_point_is_signed() {
        use crate::records::{RankSource, SnapshotPeer, SnapshotPlan};
        let signer = CommandSigner::from_seed("k1", [7; 32]);
        let public = signer.verifying_key();
        let keys = |id: &str| (id == "k1").then_some(public);
        let mut c = command();
        c.snapshots = Some(SnapshotPlan {
            step: Some(12),
            reason: "step 12".into(),
            sources: vec![RankSource {
                rank: 0,
                from_rank: 0,
                node: "n2".into(),
            }],
            replica_holders: vec!["n2".into()],
            peers: vec![SnapshotPeer {
                node: "n2".into(),
                address: "10.0.0.2:7000".into(),
            }],
            interval_steps: 4,
            interval_reason: "every 4 steps".into(),
        });
        signer.sign(&mut c);
        assert_eq!(verify(&c, keys), Ok(()));
        let tamper: [fn(&mut SnapshotPlan); 5] = [
            |p| p.step = Some(11),
            |p| p.interval_steps = 1,
            |p| p.sources[0].node = "evil".into(),
            |p| p.replica_holders[0] = "evil".into(),
            |p| p.peers[0].address = "10.6.6.6:7000".into(),
        ];
        for change in tamper {
            let mut t = c.clone();
            change(t.snapshots.as_mut().unwrap());
            assert_eq!(verify(&t, keys), Err(SignatureError::Mismatch));
        }
    }

    #[test]
    fn signatures_are_deterministic() {
        let signer = CommandSigner::from_seed("k1", [9; 32]);
        let (mut a, mut b) = (command(), command());
        signer.sign(&mut a);
        signer.sign(&mut b);
        assert_eq!(a.signature, b.signature);
    }
}
