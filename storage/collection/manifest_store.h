// Manifest store: installs a new CollectionManifest atomically (I-6).
//
// MANIFEST-<n> files are immutable; the file CURRENT names the live one. Installing version n+1
// writes MANIFEST-<n+1> (temp, fsync, rename), then replaces CURRENT the same way, then removes
// MANIFEST-<n> (best effort: once CURRENT names n+1 the install has happened, and a leftover
// MANIFEST-<n> is removed when the collection next opens). A crash at any point leaves CURRENT
// naming a complete manifest.
//
// Thread-safety: none; callers serialise installs per collection directory.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "storage/format/manifest_format.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

struct LoadedManifest {
  CollectionManifest manifest;
  uint64_t number = 0;  // the n of MANIFEST-<n>
};

// "MANIFEST-000042" for 42.
std::string ManifestFileName(uint64_t number);

// NOT_FOUND when the directory has no CURRENT.
absl::StatusOr<LoadedManifest> LoadManifest(FileSystem* fs, const std::string& dir);

// Installs `manifest` as MANIFEST-<previous_number + 1>; returns the new number. On failure
// CURRENT may name either version (see the comment above).
absl::StatusOr<uint64_t> InstallManifest(FileSystem* fs, const std::string& dir,
                                         const CollectionManifest& manifest,
                                         uint64_t previous_number);

}  // namespace shoal::storage
