#include "runtime/resident_weights.h"

#include "absl/strings/str_cat.h"
#include "compiler/ir/dense_block.h"
#include "compiler/support/status_macros.h"

namespace einsummable::runtime {

absl::StatusOr<std::shared_ptr<ResidentWeights>>
ResidentWeights::allocate(physical::ResidentLayout layout, Backend& backend) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<ResidentMemory> memory,
                                 backend.allocate_resident(layout.arena_bytes));
    return std::shared_ptr<ResidentWeights>(
        new ResidentWeights(std::move(layout), std::move(memory)));
}

const physical::ResidentTensor* ResidentWeights::find(absl::string_view name) const {
    auto it = layout_.tensors.find(std::string(name));
    return it == layout_.tensors.end() ? nullptr : &it->second;
}

absl::Status ResidentWeights::write(absl::string_view name, absl::Span<const std::byte> bytes) {
    const physical::ResidentTensor* tensor = find(name);
    if (tensor == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is not a resident input of this layout"));
    }
    if (static_cast<int64_t>(bytes.size()) != tensor->type.bytes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("resident input '", name, "' ", tensor->type.to_string(), " takes ",
                         tensor->type.bytes(), " bytes; got ", bytes.size()));
    }
    const int64_t element_bytes = ir::dtype_size(tensor->type.dtype);
    const ir::Box whole = tensor->type.box();
    std::vector<std::byte> block_bytes;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    for (const physical::ResidentBlock& block : tensor->blocks) {
        block_bytes.resize(block.box.volume() * element_bytes);
        ir::copy_region(bytes.data(), whole, block_bytes.data(), block.box, block.box,
                        element_bytes);
        if (absl::Status status = memory_->write(block.device, block.offset, block_bytes);
            !status.ok()) {
            return absl::Status(status.code(),
                                absl::StrCat("resident input '", name, "': ", status.message()));
        }
    }
    std::lock_guard<std::mutex> state(state_mutex_);
    written_.insert(std::string(name));
    return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> ResidentWeights::read(absl::string_view name) const {
    const physical::ResidentTensor* tensor = find(name);
    if (tensor == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("'", name, "' is not a resident input of this layout"));
    }
    const int64_t element_bytes = ir::dtype_size(tensor->type.dtype);
    const ir::Box whole = tensor->type.box();
    std::vector<std::byte> bytes(tensor->type.bytes());
    std::vector<std::byte> block_bytes;
    std::shared_lock<std::shared_mutex> lock(mutex_);
    // Blocks are sorted by device: writing them in reverse leaves each position as the first
    // block holding it has it.
    for (auto it = tensor->blocks.rbegin(); it != tensor->blocks.rend(); ++it) {
        block_bytes.resize(it->box.volume() * element_bytes);
        EINSUMMABLE_RETURN_IF_ERROR(
            memory_->read(it->device, it->offset, absl::MakeSpan(block_bytes)));
        ir::copy_region(block_bytes.data(), it->box, bytes.data(), whole, it->box, element_bytes);
    }
    return bytes;
}

bool ResidentWeights::written(absl::string_view name) const {
    std::lock_guard<std::mutex> state(state_mutex_);
    return written_.count(std::string(name)) > 0;
}

int64_t ResidentWeights::generation() const {
    std::lock_guard<std::mutex> state(state_mutex_);
    return generation_;
}

void ResidentWeights::set_generation(int64_t generation) {
    std::lock_guard<std::mutex> state(state_mutex_);
    generation_ = generation;
}

} // namespace einsummable::runtime
