// The worker processes of the reliability runner (see worker.cpp for the modes).
#pragma once

namespace colock::reliability {

/// Runs `argv[0] worker MODE --key value ...`; returns the process exit code.
int worker_main(int argc, char** argv);

} // namespace colock::reliability
