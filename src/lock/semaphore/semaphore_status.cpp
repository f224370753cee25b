// The status of a semaphore or a read-write lock: what its keys hold (one script) and who holds
// it (the holder records of the lockers its first holdings name).
#include "lock/semaphore/semaphore_core.hpp"

#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/locker_context.hpp"

#include <colock/error.hpp>

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <map>

namespace colock {

std::string_view to_string(rw_state state) noexcept {
    switch (state) {
    case rw_state::free:
        return "free";
    case rw_state::shared:
        return "shared";
    case rw_state::exclusive:
        return "exclusive";
    }
    return "unknown";
}

namespace detail {

namespace asio = boost::asio;
using boost::system::system_error;
using std::chrono::milliseconds;

namespace {

// A count the keys hold as text ("" for none: 0); nullopt when it is not digits.
std::optional<std::uint64_t> stored_count(std::string_view text) {
    if (text.empty())
        return 0;
    std::uint64_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size())
        return std::nullopt;
    return n;
}

} // namespace

asio::awaitable<semaphore_status> read_status(std::shared_ptr<semaphore_core> core) {
    auto& locker = core->locker();
    auto fail = [&](boost::system::error_code ec, std::string const& why) {
        return system_error(
            ec, fmt::format("colock: status of {} '{}': {}", core->kind(), core->name(), why));
    };
    auto const r = co_await core->store().read_permits(core->keys(), max_listed_holdings);
    if (r.ec)
        throw fail(r.ec, core->failure_text(r.ec, r.server_text, lock_options{}, false));
    auto const capacity = stored_count(r.capacity.value_or(""));
    auto const fence = stored_count(r.fence);
    if (!capacity || !fence)
        throw fail(error::unexpected_reply,
                   fmt::format("its key {} holds capacity \"{}\" and fence \"{}\", which are not "
                               "what colock writes; was it set by something else?",
                               core->keys().key, r.capacity.value_or(""), r.fence));
    semaphore_status st;
    st.name = core->name();
    st.capacity = static_cast<std::size_t>(*capacity);
    st.used = static_cast<std::size_t>(std::max<std::int64_t>(r.held, 0));
    st.fence = static_cast<std::int64_t>(*fence);
    st.queued = static_cast<std::size_t>(std::max<std::int64_t>(r.queued, 0));
    // Each holder's record read once, however many of the holdings are its locker's.
    std::map<std::string, std::optional<holder_info>> records;
    for (auto const& h : r.holdings) {
        holding_status hs;
        hs.token = h.token;
        hs.permits = static_cast<std::size_t>(h.permits);
        hs.ttl = milliseconds(std::max<std::int64_t>(h.expiry_ms - r.now_ms, 0));
        // "<locker id>.<random>": a token without the dot names no locker.
        if (auto const dot = h.token.find('.'); dot != std::string::npos)
            hs.holder_id = h.token.substr(0, dot);
        if (!hs.holder_id.empty()) {
            auto known = records.find(hs.holder_id);
            if (known == records.end()) {
                auto const record =
                    co_await core->store().read_record(locker.locker_key_prefix() + hs.holder_id);
                if (record.ec)
                    throw fail(record.ec, core->failure_text(record.ec, record.server_text,
                                                             lock_options{}, false));
                std::optional<holder_info> info;
                if (!record.fields.empty())
                    info = read_holder(record.fields);
                known = records.emplace(hs.holder_id, std::move(info)).first;
            }
            hs.holder = known->second;
        }
        st.holdings.push_back(std::move(hs));
    }
    co_return st;
}

} // namespace detail

} // namespace colock
