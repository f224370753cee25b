// A quorum store's primaries: for each, its engine, the single_connection_store that runs the
// lock scripts on it (on the quorum's strand) and its endpoint for messages; and the facts the
// quorum reads over all of them. Fixed once made; shared by the store and the rounds in flight,
// whose stragglers may outlive the store. Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include "redis/engine.hpp"

#include <colock/redis/connection.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace colock::detail::redlock {

class quorum_members {
public:
    quorum_members(std::span<redis::connection* const> primaries,
                   boost::asio::strand<boost::asio::any_io_executor> strand);

    // Where the quorum's state lives; the members' stores share it.
    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return strand_;
    }
    std::size_t size() const noexcept { return primaries_.size(); }
    // Primary i's store: the rounds ask it, the quorum store hands it what goes to every primary.
    lease_store& store(std::size_t i) const noexcept { return *primaries_[i].store; }
    // "host:port" of each primary, for messages.
    std::span<std::string const> endpoints() const noexcept { return endpoints_; }
    std::string const& endpoint(std::size_t i) const noexcept { return endpoints_[i]; }

    // Connected once and not now: reconnecting (a connection never used yet is asked, which
    // connects it).
    bool is_down(std::size_t i) const;
    // Primary i's count of server changes for `key`, read from its engine.
    std::uint64_t server_changes_for(std::size_t i, std::string const& key) const noexcept;

    // The first time two primaries turn out to be one server (the same run_id), every attempt
    // is refused: Redlock over it would count one server twice.
    std::optional<std::string> same_server_twice() const;

    // Connected: a majority of the primaries is.
    bool is_connected() const noexcept;
    // Each primary's last failure, named by its endpoint; an empty string when none failed.
    std::string last_error_text() const;
    std::uint64_t reconnects() const noexcept;

private:
    struct primary {
        redis::detail::shared_engine engine;
        std::shared_ptr<lease_store> store;
    };

    boost::asio::strand<boost::asio::any_io_executor> const strand_;
    std::vector<primary> primaries_;
    std::vector<std::string> endpoints_;
};

} // namespace colock::detail::redlock
