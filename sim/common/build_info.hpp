#pragma once
// What build this binary is: the git commit of the source tree it was built from, with "-dirty"
// when tracked files had uncommitted changes, or "unknown" outside a git checkout. Recorded in the
// files that must say which code produced them (the speed calibration). The definition is
// generated at every build (scripts/build_info.cmake).

namespace fp8sim {

const char* build_commit();

}  // namespace fp8sim
