// An election's requests: the proclaim (the campaign's claim of its term, and every new value)
// and the read, through the locker's store (which, over a quorum, asks every primary and
// decides by majority), with errors that name the election.
#include "lock/election/election_core.hpp"

#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/locker_context.hpp"

#include <colock/error.hpp>

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

election_core::election_core(std::shared_ptr<locker_context> locker, std::string name)
    : locker_(std::move(locker))
    , name_(std::move(name))
    , space_{locker_->prefix() + "election:", true, "election"}
    , keys_(space_, name_, locker_->id()) {
    locker_->store().require(holding_kind::election, space_.kind, name_);
}

std::size_t election_core::majority() const noexcept {
    return locker_->store().majority();
}

std::string election_core::failure_text(std::string_view what, error_code ec,
                                        std::string_view server_text) const {
    std::string why(server_text);
    if (why.empty() && is_connect_failure(ec))
        why = locker_->store().last_error_text();
    if (why.empty())
        why = ec.message();
    return fmt::format("colock: {} of election '{}': {}", what, name_,
                       with_acl_pointer(std::move(why), space_.kind));
}

asio::awaitable<bool> election_core::proclaim(lock_guard const& guard, std::string const& value,
                                              std::int64_t version, bool retrying) {
    proclaim_request request;
    request.token = guard.token();
    request.term = guard.fence();
    request.value = value;
    request.owner = locker_->id();
    request.version = version;
    request.lease_left = std::max(std::chrono::duration_cast<milliseconds>(
                                      guard.lease_expiry() - std::chrono::steady_clock::now()),
                                  milliseconds{1});
    // The campaign's claim is sent again over passing errors while the lease is ours.
    request.retrying = retrying;
    if (retrying)
        request.still_ours = [&guard] { return guard.owns(); };
    auto const r = co_await locker_->store().proclaim(keys_, request);
    if (r.ec)
        throw system_error(r.ec, failure_text("proclaim", r.ec, r.server_text));
    co_return r.written;
}

asio::awaitable<election_reading> election_core::read() {
    return locker_->store().read_election(keys_);
}

asio::awaitable<std::optional<leader_info>> election_core::leader() {
    auto const r = co_await read();
    if (r.ec)
        throw system_error(r.ec, failure_text("leader query", r.ec, r.server_text));
    if (!r.leading)
        co_return std::nullopt;
    leader_info info{r.value, r.term, r.owner, std::nullopt,
                     std::max(r.record_ttl, milliseconds{0})};
    auto const record =
        co_await locker_->store().read_record(locker_->locker_key_prefix() + r.owner);
    if (record.ec)
        throw system_error(record.ec, failure_text("leader query", record.ec, record.server_text));
    if (!record.fields.empty())
        info.holder = read_holder(record.fields);
    co_return info;
}

asio::awaitable<bool> election_core::force_resign() {
    // The lock's forced unlock of the election's keys: it ends the record with the lease and
    // tells the watches; the notify prefix is the locker's own, where the leader listens.
    auto const r = co_await locker_->store().force_unlock(keys_, locker_->locker_key_prefix());
    if (r.ec)
        throw system_error(r.ec, failure_text("forced resign", r.ec, r.server_text));
    if (r.ended && locker_->store().logs(log_level::warning))
        locker_->store().log(log_level::warning,
                             fmt::format("colock: election '{}' force-resigned: the term of "
                                         "locker {} was ended",
                                         name_, r.owner));
    co_return r.ended;
}

} // namespace colock::detail
