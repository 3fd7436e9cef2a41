//! The CPU features RocksDB's C++ was compiled to use (`.cargo/config.toml`: SSE4.2 and PCLMUL
//! for its CRC32C on x86-64), so that loading kstate on a CPU without them fails with a clear
//! error instead of an illegal instruction in the first checksum.

/// The C++ flags of this build's RocksDB (cargo's `[env]` reaches build scripts and rustc alike).
#[cfg(target_arch = "x86_64")]
const CXXFLAGS: &str = match option_env!("CXXFLAGS_x86_64_unknown_linux_gnu") {
    Some(flags) => flags,
    None => "",
};

/// A `-m` flag of the C++ build and the CPU feature it makes the code use.
const FLAG_FEATURES: &[(&str, &str)] = &[("-msse4.2", "sse4.2"), ("-mpclmul", "pclmulqdq")];

/// The CPU features that C++ compiled with `cxxflags` needs.
pub fn required_features(cxxflags: &str) -> Vec<&'static str> {
    let flags: Vec<&str> = cxxflags.split_whitespace().collect();
    FLAG_FEATURES
        .iter()
        .filter(|(flag, _)| flags.contains(flag))
        .map(|&(_, feature)| feature)
        .collect()
}

/// The features this build needs that the running CPU lacks (empty: kstate can run here).
pub fn missing_cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        required_features(CXXFLAGS)
            .into_iter()
            .filter(|feature| !has_feature(feature))
            .collect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

#[cfg(target_arch = "x86_64")]
fn has_feature(feature: &str) -> bool {
    match feature {
        "sse4.2" => std::arch::is_x86_feature_detected!("sse4.2"),
        "pclmulqdq" => std::arch::is_x86_feature_detected!("pclmulqdq"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_follow_the_flags() {
        assert_eq!(
            required_features("-O2 -msse4.2 -mpclmul"),
            ["sse4.2", "pclmulqdq"]
        );
        assert_eq!(required_features("-msse4.2"), ["sse4.2"]);
        assert!(required_features("").is_empty());
        assert!(required_features("-msse4.22").is_empty());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_build_uses_hardware_crc_and_this_machine_has_it() {
        assert_eq!(required_features(CXXFLAGS), ["sse4.2", "pclmulqdq"]);
        assert!(missing_cpu_features().is_empty());
    }
}
