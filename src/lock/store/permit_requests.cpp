// A semaphore's requests over one connection.
#include "lock/store/permit_requests.hpp"

#include "lock/base/errors.hpp"
#include "lock/store/permit_replies.hpp"
#include "lock/store/script_client.hpp"

#include <boost/asio/dispatch.hpp>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

asio::awaitable<permit_grant> permit_requests::grant(semaphore_keys const& keys,
                                                     permit_request const& request,
                                                     asio::cancellation_slot stop) const {
    auto const count = std::to_string(request.permits);
    auto const capacity = std::to_string(request.capacity);
    auto const ttl_text = std::to_string(request.ttl.count());
    auto const entry_ttl_text = std::to_string(queue_entry_ttl.count());
    auto const claim_text = std::to_string(max_handoff_claim.count());
    script_call const call{
        client_->scripts().semaphore_acquire,
        {keys.key, keys.permits_key, keys.weights_key, keys.queue_key, keys.entries_key},
        {request.token, count, capacity, ttl_text, request.owner, request.queue ? "1" : "0",
         entry_ttl_text, request.new_fence ? "1" : "0", keys.channel_prefix, claim_text}};
    co_return read_permit_grant(co_await client_->run(call, stop));
}

asio::awaitable<permit_extension> permit_requests::extend(semaphore_keys const& keys,
                                                          std::string const& token,
                                                          milliseconds ttl, bool weigh) const {
    auto const ttl_text = std::to_string(ttl.count());
    script_call const call{client_->scripts().semaphore_extend,
                           {keys.key, keys.permits_key, keys.weights_key},
                           {token, ttl_text, weigh ? "1" : "0"}};
    auto const reply = co_await client_->run(call);
    co_return weigh ? read_permit_extension(reply)
                    : permit_extension{read_permit_reply(reply), false};
}

asio::awaitable<lease_reply> permit_requests::downgrade(semaphore_keys const& keys,
                                                        std::string const& token) const {
    auto const claim_text = std::to_string(max_handoff_claim.count());
    script_call const call{
        client_->scripts().semaphore_downgrade,
        {keys.key, keys.permits_key, keys.weights_key, keys.queue_key, keys.entries_key},
        {token, keys.channel_prefix, claim_text}};
    co_return read_permit_reply(co_await client_->run_retrying(call, release_retries));
}

asio::awaitable<lease_reply> permit_requests::release(semaphore_keys const& keys,
                                                      std::string const& token, std::size_t permits,
                                                      bool leave) const {
    auto const count = std::to_string(permits);
    auto const claim_text = std::to_string(max_handoff_claim.count());
    script_call const call{
        client_->scripts().semaphore_release,
        {keys.key, keys.permits_key, keys.weights_key, keys.queue_key, keys.entries_key},
        {token, keys.channel_prefix, claim_text, leave ? "1" : "0", count, keys.capacity}};
    co_return read_permit_reply(
        co_await client_->run_retrying(call, leave ? leave_retries : release_retries));
}

void permit_requests::release_in_background(semaphore_keys const& keys, std::string const& token,
                                            std::size_t permits, bool leave,
                                            std::function<void()> retry) const {
    auto const count = std::to_string(permits);
    auto const claim_text = std::to_string(max_handoff_claim.count());
    script_call const call{
        client_->scripts().semaphore_release,
        {keys.key, keys.permits_key, keys.weights_key, keys.queue_key, keys.entries_key},
        {token, keys.channel_prefix, claim_text, leave ? "1" : "0", count, keys.capacity}};
    client_->run_detached(
        call, [strand = client_->strand(), retry = std::move(retry)](script_reply const& reply) {
            if (reply.ec && is_transient(reply.ec, reply.server_text()))
                asio::dispatch(strand, std::move(retry));
        });
}

asio::awaitable<semaphore_reading> permit_requests::read(semaphore_keys const& keys,
                                                         std::size_t listed) const {
    auto const listed_text = std::to_string(listed); // a local: the call holds views
    script_call const call{
        client_->scripts().semaphore_read,
        {keys.key, keys.permits_key, keys.weights_key, keys.queue_key, keys.entries_key},
        {listed_text}};
    co_return read_semaphore(co_await client_->run(call));
}

} // namespace colock::detail
