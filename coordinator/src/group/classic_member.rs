//! What a group keeps of a member that speaks Kafka's classic protocol: a type of its
//! own, so the group's membership holds it without depending on the classic rules
//! (`classic.rs`), which depend on the membership.

/// What the coordinator keeps of a member that speaks the classic protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    /// Its session timeout (from its JoinGroup), in place of the coordinator's.
    pub session_timeout_ms: i32,
    /// The protocol names (assignors) it offered, preferred first; never empty.
    pub protocols: Vec<String>,
}

impl ClassicMember {
    /// The protocol its JoinGroup and SyncGroup are answered with: its first.
    pub fn protocol_name(&self) -> &str {
        self.protocols
            .first()
            .map(String::as_str)
            .unwrap_or_default()
    }
}
