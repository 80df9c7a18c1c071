# Checks of the layering (docs/design.md "Layers") that a link cycle would not catch: a layer
# linking one above it, such as the daemon linking a library of the command-line tools.

# The targets `target` links, directly or through the targets it links (PRIVATE and PUBLIC
# alike), in `out`. Imported targets (abseil, gRPC, ...) are listed but not followed.
function(_einsummable_linked_targets target out)
    set(pending ${target})
    set(seen)
    while(pending)
        list(POP_FRONT pending current)
        get_target_property(aliased ${current} ALIASED_TARGET)
        if(aliased)
            set(current ${aliased})
        endif()
        if(current IN_LIST seen)
            continue()
        endif()
        list(APPEND seen ${current})
        get_target_property(imported ${current} IMPORTED)
        if(imported)
            continue()
        endif()
        set(links)
        foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
            get_target_property(values ${current} ${property})
            if(values)
                list(APPEND links ${values})
            endif()
        endforeach()
        foreach(link IN LISTS links)
            # A static library's PRIVATE links appear as $<LINK_ONLY:name>.
            string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
            if(TARGET ${link})
                list(APPEND pending ${link})
            endif()
        endforeach()
    endwhile()
    list(REMOVE_ITEM seen ${target})
    set(${out} ${seen} PARENT_SCOPE)
endfunction()

# The targets defined in `dir` and the folders under it that CMake visits, in `out`.
function(_einsummable_defined_targets dir out)
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    foreach(subdirectory IN LISTS subdirectories)
        _einsummable_defined_targets(${subdirectory} more)
        list(APPEND targets ${more})
    endforeach()
    set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Fails configuration when a target defined in `from_dir` (relative to the project's root, or a
# folder under it) links, directly or not, a target defined in `to_dir` or a folder under it.
# Call it once every folder has been added.
function(einsummable_forbid_links from_dir to_dir)
    _einsummable_defined_targets(${PROJECT_SOURCE_DIR}/${from_dir} targets)
    foreach(target IN LISTS targets)
        _einsummable_linked_targets(${target} linked)
        foreach(link IN LISTS linked)
            get_target_property(imported ${link} IMPORTED)
            if(imported)
                continue()
            endif()
            get_target_property(source_dir ${link} SOURCE_DIR)
            file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${source_dir})
            if(relative STREQUAL to_dir OR relative MATCHES "^${to_dir}/")
                message(FATAL_ERROR
                        "${from_dir}/ must not depend on ${to_dir}/ (docs/design.md \"Layers\"): "
                        "${target} links ${link}, defined in ${relative}/")
            endif()
        endforeach()
    endforeach()
endfunction()
