// The free values a store's releases left (free_values.hpp).
#include "lock/store/free_values.hpp"

#include <iterator>

namespace colock::detail {

std::uint64_t free_values::remember(std::string const& key, std::int64_t fence,
                                    lock_clock::time_point until) {
    auto const now = lock_clock::now();
    if (until <= now)
        return 0;
    std::lock_guard lock(mutex_);
    if (values_.size() >= capacity && !values_.contains(key)) {
        // Full: the lapsed ones go first; if none has, this one is not remembered.
        for (auto it = values_.begin(); it != values_.end();)
            it = it->second.until <= now ? values_.erase(it) : std::next(it);
        if (values_.size() >= capacity)
            return 0;
    }
    auto const id = ++next_id_;
    values_.insert_or_assign(key, entry{fence, until, id});
    return id;
}

void free_values::forget(std::string const& key, std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto const it = values_.find(key);
    if (it != values_.end() && it->second.id == id)
        values_.erase(it);
}

std::optional<std::int64_t> free_values::take(std::string const& key, lock_clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (values_.empty())
        return std::nullopt;
    auto const it = values_.find(key);
    if (it == values_.end())
        return std::nullopt;
    auto const e = it->second;
    values_.erase(it);
    if (e.until <= now)
        return std::nullopt;
    return e.fence;
}

void free_values::clear() {
    std::lock_guard lock(mutex_);
    values_.clear();
}

std::size_t free_values::size() const {
    std::lock_guard lock(mutex_);
    return values_.size();
}

} // namespace colock::detail
