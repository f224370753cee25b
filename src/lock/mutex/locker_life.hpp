// What keeps a locker's state alive for the work its units leave running in the background (a
// give-back, a timer, a subscription): a share of the locker, which a unit holds without seeing
// what is in it. Private to the library's sources.
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace colock::detail {

class locker_life {
public:
    // `share` gives the locker's own pointer, or null once it is going.
    explicit locker_life(std::function<std::shared_ptr<void>()> share) : share_(std::move(share)) {}

    // The locker, held while the result lives; null when it is going. From any thread.
    std::shared_ptr<void> hold() const { return share_(); }
    // `part` of the locker, held with it: null when the locker is going.
    template <class Part>
    std::shared_ptr<Part> hold(Part& part) const {
        auto whole = hold();
        if (!whole)
            return nullptr;
        return std::shared_ptr<Part>(std::move(whole), &part);
    }
    // As hold(part), for a locker known to be there, as shared_from_this() is:
    // std::bad_weak_ptr when it is going.
    template <class Part>
    std::shared_ptr<Part> share(Part& part) const {
        auto held = hold(part);
        if (!held)
            throw std::bad_weak_ptr();
        return held;
    }

private:
    std::function<std::shared_ptr<void>()> const share_;
};

} // namespace colock::detail
