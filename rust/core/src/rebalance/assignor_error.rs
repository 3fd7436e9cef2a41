//! `AssignorError` (spec 2.5): the i32 error code of AssignmentInfo v4+ and SubscriptionInfo v9+.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignorError {
    None,
    IncompleteSourceTopicMetadata,
    /// Legacy: Kafka 2.4-2.5 set it locally to force a rejoin; never sent since.
    VersionProbing,
    AssignmentError,
    ShutdownRequested,
}

impl AssignorError {
    pub const ALL: [AssignorError; 5] = [
        AssignorError::None,
        AssignorError::IncompleteSourceTopicMetadata,
        AssignorError::VersionProbing,
        AssignorError::AssignmentError,
        AssignorError::ShutdownRequested,
    ];

    pub fn code(self) -> i32 {
        match self {
            AssignorError::None => 0,
            AssignorError::IncompleteSourceTopicMetadata => 1,
            AssignorError::VersionProbing => 2,
            AssignorError::AssignmentError => 3,
            AssignorError::ShutdownRequested => 4,
        }
    }

    /// `None` for a code Kafka does not define.
    pub fn from_code(code: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|error| error.code() == code)
    }

    /// Kafka's enum constant name, e.g. `SHUTDOWN_REQUESTED`.
    pub fn name(self) -> &'static str {
        match self {
            AssignorError::None => "NONE",
            AssignorError::IncompleteSourceTopicMetadata => "INCOMPLETE_SOURCE_TOPIC_METADATA",
            AssignorError::VersionProbing => "VERSION_PROBING",
            AssignorError::AssignmentError => "ASSIGNMENT_ERROR",
            AssignorError::ShutdownRequested => "SHUTDOWN_REQUESTED",
        }
    }
}
