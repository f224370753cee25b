// The worker side of the reliability runner: one process with one connection and one locker,
// started by the runner with `worker MODE --key value ...`. It reports on stdout, one event per
// line, and records every tenure it had in the shared history file. With `--urls url,url,...`
// instead of `--url url`, contend, hold and storm take their locks with a Redlock locker over
// one connection per URL (lock_client).
//
// Modes, one file per family beside the helpers they share (worker_support.hpp):
//   worker_lock.cpp
//   contend  coroutines loop co_lock / read-modify-write of a shared counter file / unlock on one
//            name until a deadline; prints "summary ..." at the end. With --journal FILE, also
//            keeps a journal (journal.hpp) that survives a SIGKILL.
//   hold     takes one lock and follows commands from stdin (write VALUE, unlock), printing
//            "acquired NS FENCE", "lost NS", "write accepted|refused", "released 0|1".
//   worker_load.cpp
//   storm    coroutines take locks on a few names, each co_lock raced against a random timer
//            (so most are cancelled), until a deadline; prints "summary ...", then waits for
//            "exit" on stdin so its background releases can finish.
//   waiters  one holder, N coroutines waiting on the same name: memory per waiter, then M are
//            served in turn and the rest cancelled; prints "summary ...".
//   worker_election.cpp
//   lead     campaigns once, then asks owns() every --step-ms and follows commands from stdin
//            (write VALUE, state, resign); prints "leading NS TERM", "step NS LEADS LOST" at
//            each step until one finds it does not lead, "lost NS", "write accepted|refused",
//            "resigned 0|1".
//   campaign campaigns again and again with random holds, proclaims and resigns, writing a
//            fenced store while it leads and an election journal (election_journal.hpp) that
//            survives a SIGKILL; prints "summary ...".
//   observe  watches the election (leader_watch) and says each change it reports, "change NS
//            LEADING TERM RESYNCED VALUE", until "exit" on stdin.
//   worker_shared.cpp
//   permits  coroutines loop co_acquire (one permit, or two for every --double-every'th) / hold
//            / release on one semaphore until a deadline; prints "summary ...". With --journal
//            FILE, also keeps a journal (journal.hpp) that survives a SIGKILL.
//   rw       reader and writer coroutines on one read-write lock until a deadline, writers now
//            and then downgrading, each kind's tenures to its own history; prints "summary ..."
//            with the longest writer wait. --journal as for permits. With --unknown-act-ms N
//            and --history-believed FILE, a writer whose downgrade's outcome is unknown works
//            on as the writer for N ms whenever owns() says it is one (each stretch to
//            FILE), then downgrades again if it holds a reader's lease.
//   worker_promises.cpp
//   with_lock coroutines loop co_with_lock on one name until a deadline, every --stall-every'th
//            work blocking the thread for --stall-ms; each call's tenure to the history (a
//            returned one as its whole work); prints "summary ...".
#include "worker.hpp"

#include "worker_support.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string_view>
#include <utility>

namespace colock::reliability {

int worker_main(int argc, char** argv) {
    // Die with the runner: no worker outlives a crashed or killed run.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    if (argc < 3) {
        std::fputs("usage: worker MODE --key value ...\n", stderr);
        return 2;
    }
    std::string_view const mode = argv[2];
    try {
        arguments const args(argc, argv, 3);
        using mode_main = int (*)(arguments const&);
        static constexpr std::pair<std::string_view, mode_main> modes[] = {
            {"contend", run_contend},     {"hold", run_hold},       {"storm", run_storm},
            {"waiters", run_waiters},     {"lead", run_lead},       {"campaign", run_campaign},
            {"observe", run_observe},     {"permits", run_permits}, {"rw", run_rw},
            {"with_lock", run_with_lock}, {"sets", run_sets},
        };
        for (auto const& [name, run] : modes)
            if (mode == name)
                return run(args);
        std::fprintf(stderr, "worker: unknown mode '%.*s'\n", static_cast<int>(mode.size()),
                     mode.data());
        return 2;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "worker %.*s: %s\n", static_cast<int>(mode.size()), mode.data(),
                     e.what());
        return 1;
    }
}

} // namespace colock::reliability
