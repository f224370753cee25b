#include "lock/base/token.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <system_error>

namespace colock::detail {

namespace {
std::atomic<unsigned> fork_generation{0};
} // namespace

// 16 bytes from the OS random source, drawn from a per-thread buffer refilled by getrandom 4 KiB
// at a time: one system call per 256 tokens instead of one per lock call.
std::string random_token() {
    struct pool {
        unsigned char bytes[4096];
        std::size_t used = sizeof bytes;
        unsigned generation = 0;
    };
    // A forked child must not hand out its parent's remaining bytes: that would give two
    // processes the same tokens, and the acquire script treats a matching token as ours.
    static bool const at_fork_registered = [] {
        ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1); });
        return true;
    }();
    (void)at_fork_registered;
    thread_local pool random;
    unsigned const generation = fork_generation.load(std::memory_order_relaxed);
    if (random.used + 16 > sizeof random.bytes || random.generation != generation) {
        random.generation = generation;
        std::size_t got = 0;
        while (got < sizeof random.bytes) {
            ssize_t const n = ::getrandom(random.bytes + got, sizeof random.bytes - got, 0);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                throw std::system_error(errno, std::generic_category(),
                                        "colock: reading the OS random source");
            }
            got += static_cast<std::size_t>(n);
        }
        random.used = 0;
    }
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(32, '0');
    for (std::size_t i = 0; i < 16; ++i) {
        unsigned char const b = random.bytes[random.used + i];
        out[2 * i] = hex[b >> 4];
        out[2 * i + 1] = hex[b & 0x0f];
        random.bytes[random.used + i] = 0; // a token is never handed out twice
    }
    random.used += 16;
    return out;
}

} // namespace colock::detail
