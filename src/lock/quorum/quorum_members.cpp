#include "lock/quorum/quorum_members.hpp"

#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_errors.hpp"
#include "lock/store/single_connection_store.hpp"

#include <fmt/format.h>

namespace colock::detail::redlock {

quorum_members::quorum_members(std::span<redis::connection* const> primaries,
                               boost::asio::strand<boost::asio::any_io_executor> strand)
    : strand_(std::move(strand)) {
    for (auto* conn : primaries) {
        auto const& engine = redis::detail::engine_of(*conn);
        primaries_.push_back({engine, make_single_connection_store(engine, strand_)});
        endpoints_.push_back(redis::detail::engine_endpoint_text(engine));
    }
}

bool quorum_members::is_down(std::size_t i) const {
    auto const& engine = primaries_[i].engine;
    return redis::detail::engine_ever_connected(engine) &&
           !redis::detail::engine_is_connected(engine);
}

std::uint64_t quorum_members::server_changes_for(std::size_t i,
                                                 std::string const& key) const noexcept {
    return redis::detail::engine_server_changes_for(primaries_[i].engine, key);
}

std::optional<std::string> quorum_members::same_server_twice() const {
    std::vector<std::string> run_ids;
    for (auto const& p : primaries_)
        run_ids.push_back(redis::detail::engine_run_id(p.engine));
    return refusal_of(run_ids);
}

bool quorum_members::is_connected() const noexcept {
    std::size_t up = 0;
    for (auto const& p : primaries_)
        up += p.store->is_connected() ? 1 : 0;
    return up >= quorum::majority(primaries_.size());
}

std::string quorum_members::last_error_text() const {
    std::string text;
    for (std::size_t i = 0; i < primaries_.size(); ++i) {
        auto const why = primaries_[i].store->last_error_text();
        if (why.empty())
            continue;
        if (!text.empty())
            text += "; ";
        text += fmt::format("primary {}: {}", endpoints_[i], why);
    }
    return text;
}

std::uint64_t quorum_members::reconnects() const noexcept {
    std::uint64_t total = 0;
    for (auto const& p : primaries_)
        total += p.store->reconnects();
    return total;
}

} // namespace colock::detail::redlock
