//! What an agent delivered: the files it wrote or edited that still exist,
//! and every file in its deliverables directory (commands write there too),
//! as workspace-relative paths.

use std::collections::BTreeSet;

use crate::fsutil::deliverable_files;
use crate::tools::ToolContext;

pub fn collect(ctx: &ToolContext) -> Vec<String> {
    let fence = &ctx.fence;
    let mut files: BTreeSet<String> = deliverable_files(fence.workspace(), fence.agent_dir())
        .into_iter()
        .collect();
    if let Ok(written) = ctx.written.lock() {
        files.extend(
            written
                .iter()
                .filter(|p| p.is_file())
                .map(|p| fence.display(p)),
        );
    }
    files
        .into_iter()
        .take(crate::protocol::LISTED_FILES)
        .collect()
}
