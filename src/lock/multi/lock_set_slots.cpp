// A lock set whose names fall on several Cluster slots: one set per slot, taken in slot order.
#include "lock/multi/lock_set.hpp"

#include "lock/core/acquisition.hpp"

#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace colock::detail {

namespace asio = boost::asio;

namespace {

// Lets go of parts taken before a later one failed: each goes back in the background.
void give_back_parts(std::vector<std::shared_ptr<lock_set_state>>& parts) {
    for (auto& p : parts)
        if (p->release_once())
            p->let_go_on_strand();
    parts.clear();
}

} // namespace

asio::awaitable<lock_set_outcome> acquire_lock_sets(std::shared_ptr<locker_context> locker,
                                                    std::vector<std::string> names,
                                                    lock_options opt, bool wait) {
    names = distinct_names(std::move(names));
    // The names by shard, the shards in ascending order: the order every caller takes them in.
    std::map<std::uint32_t, std::vector<std::string>> shards;
    for (auto& n : names)
        shards[locker->store().names_shard(lock_keys(locker->prefix(), n, locker->id()))].push_back(
            n);
    if (shards.size() <= 1)
        co_return co_await acquire_lock_set(std::move(locker), std::move(names), std::move(opt),
                                            wait);
    auto const started = clock_type::now();
    wait_budget const budget(opt.wait_timeout, started);
    auto cs = co_await asio::this_coro::cancellation_state;
    for (;;) {
        std::vector<std::shared_ptr<lock_set_state>> parts;
        lock_set_outcome out;
        for (auto const& [shard, group] : shards) {
            auto part_opt = opt;
            part_opt.wait_timeout = budget.left(clock_type::now());
            out = co_await acquire_lock_set(locker, group, part_opt, wait);
            if (!out.state)
                break;
            parts.push_back(std::move(out.state));
        }
        if (parts.size() < shards.size()) {
            // One slot busy (co_try_lock_all), or the wait failed there: nothing is kept.
            give_back_parts(parts);
            if (out.ec && !out.message.empty())
                out.message += fmt::format(" (one slot of the set '{}')", shown_names(names));
            co_return out;
        }
        // A part lost while a later slot was waited for (its server replaced, say): the set
        // was never held whole, so it starts over within its wait.
        bool const whole =
            std::none_of(parts.begin(), parts.end(), [](auto const& p) { return p->gone(); });
        if (whole) {
            parts.front()->join_parts(parts);
            out.state = parts.front();
            co_return out;
        }
        give_back_parts(parts);
        auto const left = budget.left(clock_type::now());
        if (!wait || cancelled(cs) || (left && left->count() == 0)) {
            out.ec = cancelled(cs) ? make_error_code(asio::error::operation_aborted)
                     : wait        ? make_error_code(error::timeout)
                                   : boost::system::error_code{};
            out.message = out.ec ? acquisition_message(lock_set_kind, shown_names(names),
                                                       "a slot's lease was lost before the "
                                                       "set was held whole")
                                 : std::string();
            co_return out;
        }
    }
}

} // namespace colock::detail
