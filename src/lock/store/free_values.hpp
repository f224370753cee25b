// The free values a store's releases left, by lock key, while this process knows them: the
// uncontended cycle's next grant on such a name asks with one key (acquire_known in
// lock_scripts.hpp). Bounded; any thread. Private to the library's sources.
#pragma once

#include "lock/base/common.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace colock::detail {

class free_values {
public:
    // At most this many names are remembered: a process that frees more names within a lease's
    // ttl asks the general way for the others.
    static constexpr std::size_t capacity = 4096;

    // A release leaves "F <fence>" at `key`, which lives at least until `until`: remembered when
    // the release is sent, so that a grant sent after it on the same connection (which the
    // server runs after it) finds it. Returns the entry's id, for forget().
    std::uint64_t remember(std::string const& key, std::int64_t fence,
                           lock_clock::time_point until);
    // The release remembered as `id` did not leave its value: forgotten, unless a newer one
    // replaced it or a grant took it already (whose one-key call then finds the key changed, and
    // asks the general way).
    void forget(std::string const& key, std::uint64_t id);
    // The fence of the free value at `key`, if one is remembered that lives past `now`; taken out
    // either way (a grant replaces it).
    std::optional<std::int64_t> take(std::string const& key, lock_clock::time_point now);
    // Forgets every value: the server was replaced, or the connection is closing.
    void clear();

    std::size_t size() const;

private:
    struct entry {
        std::int64_t fence = 0;
        lock_clock::time_point until;
        std::uint64_t id = 0;
    };

    mutable std::mutex mutex_;
    std::unordered_map<std::string, entry> values_;
    std::uint64_t next_id_ = 0;
};

} // namespace colock::detail
