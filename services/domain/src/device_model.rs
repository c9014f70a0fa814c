//! Placeholder until the device-model module lands from the amd2 branch.

/// The short generation name of a device model.
pub fn generation(model: &str) -> String {
    model.trim().to_owned()
}
