// What a store that does not serve a holding kind answers: its refusal, given by every request
// of that kind, so that a synchronizer made over it anyway fails with the store's reason.
#include "lock/store/lease_store.hpp"

#include <colock/error.hpp>

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

template <class Answer>
Answer refused(lease_store const& store, holding_kind kind) {
    Answer a;
    a.ec = error::invalid_argument;
    a.server_text = store.refusal_of(kind);
    return a;
}

lease_reply refused_reply() {
    return lease_reply{error::invalid_argument, false, false};
}

} // namespace

std::string lease_store::refusal_of(holding_kind kind) const {
    switch (kind) {
    case holding_kind::lease:
        return {};
    case holding_kind::permits:
        return "the locker's store serves no semaphore";
    case holding_kind::name_set:
        return "the locker's store serves no lock on several names";
    case holding_kind::election:
        break;
    }
    return "the locker's store serves no election";
}

void lease_store::require(holding_kind kind, std::string_view what, std::string_view name) const {
    if (auto why = refusal_of(kind); !why.empty())
        throw boost::system::system_error(error::invalid_argument,
                                          fmt::format("colock: {} '{}': {}", what, name, why));
}

asio::awaitable<proclaim_result> lease_store::proclaim(lock_keys const&, proclaim_request const&) {
    co_return refused<proclaim_result>(*this, holding_kind::election);
}

asio::awaitable<election_reading> lease_store::read_election(lock_keys const&) {
    co_return refused<election_reading>(*this, holding_kind::election);
}

asio::awaitable<permit_grant>
lease_store::grant_permits(semaphore_keys const&, permit_request const&, asio::cancellation_slot) {
    co_return refused<permit_grant>(*this, holding_kind::permits);
}

asio::awaitable<permit_extension>
lease_store::extend_permits(semaphore_keys const&, std::string const&, milliseconds, bool) {
    co_return permit_extension{refused_reply(), false};
}

asio::awaitable<lease_reply> lease_store::downgrade_permits(semaphore_keys const&,
                                                            std::string const&) {
    co_return refused_reply();
}

asio::awaitable<lease_reply> lease_store::release_permits(semaphore_keys const&, std::string const&,
                                                          std::size_t, bool) {
    co_return refused_reply();
}

void lease_store::release_permits_in_background(semaphore_keys const&, std::string const&,
                                                std::size_t, bool, std::function<void()>) {}

asio::awaitable<semaphore_reading> lease_store::read_permits(semaphore_keys const&, std::size_t) {
    co_return refused<semaphore_reading>(*this, holding_kind::permits);
}

asio::awaitable<names_grant> lease_store::grant_names(std::span<lock_keys const>,
                                                      names_request const&,
                                                      asio::cancellation_slot) {
    co_return names_grant{refused<grant_result>(*this, holding_kind::name_set), {}};
}

asio::awaitable<lease_reply> lease_store::extend_names(std::span<lock_keys const>,
                                                       std::string const&, milliseconds) {
    co_return refused_reply();
}

asio::awaitable<lease_reply> lease_store::release_names(std::span<lock_keys const>,
                                                        std::string const&, std::string const&,
                                                        bool, std::span<std::int64_t const>) {
    co_return refused_reply();
}

void lease_store::release_names_in_background(std::span<lock_keys const>, std::string const&,
                                              std::string const&, bool,
                                              std::span<std::int64_t const>,
                                              std::function<void()>) {}

} // namespace colock::detail
