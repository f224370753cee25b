/// \file
/// colock's scripts as a Redis Functions library, for an administrator who loads it ahead of
/// users allowed to call it (`+fcall`) but not to load code of their own. A connection loads the
/// library by itself where its user may (see redis::config::use_functions).
#pragma once

#include <colock/redis/config.hpp>

#include <string>

namespace colock {

/// A Redis Functions library: its name and the code `FUNCTION LOAD` takes.
struct functions_library {
    /// "colock_" and a hash of the scripts it holds: each release of colock has its own, so
    /// that processes of two releases on one server call each their own.
    std::string name;
    /// The library's code, starting with "#!lua name=<name>".
    std::string code;
};

/// The library that lockers on a connection made with `cfg` call: for a Redis Cluster, the
/// variant whose wake-ups go by `SPUBLISH` on the lock's own slot; otherwise the one for a single
/// server or a Sentinel-managed primary. Load it on every primary (a Cluster's each) with
/// `FUNCTION LOAD`; a server that has it answers that it exists, which is no harm. Pure: no I/O.
functions_library functions_library_for(redis::config const& cfg);

} // namespace colock
