//! `--durability`, as the parent hands it to each agent in its task file:
//! both sides flush their records at the same points. What a mode means
//! for one write is `fsutil`'s.

use serde::{Deserialize, Serialize};

/// When troupe flushes its records to the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityMode {
    /// At the commit points only.
    #[default]
    Commit,
    /// On every write.
    Strict,
}

impl std::str::FromStr for DurabilityMode {
    type Err = String;

    /// The word as a flag, a variable or the config file gives it, in any
    /// case.
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "commit" => Ok(DurabilityMode::Commit),
            "strict" => Ok(DurabilityMode::Strict),
            _ => Err(format!("`{text}` is not a durability: commit or strict")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_read_in_any_case() {
        assert_eq!("Strict".parse(), Ok(DurabilityMode::Strict));
        assert_eq!("commit".parse(), Ok(DurabilityMode::Commit));
        assert_eq!(
            "often".parse::<DurabilityMode>(),
            Err("`often` is not a durability: commit or strict".to_string())
        );
    }
}
