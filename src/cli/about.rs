//! The command line about itself: shell completions and the manual page,
//! both generated from the definitions `--help` is made of.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe completions bash > ~/.local/share/bash-completion/completions/troupe\n  troupe completions zsh > ~/.zfunc/_troupe\n  troupe completions fish > ~/.config/fish/completions/troupe.fish"
)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe man | man -l -\n  troupe man --dir /usr/local/share/man/man1"
)]
pub struct ManArgs {
    /// Write troupe.1 and a troupe-COMMAND.1 for each command into DIR
    /// instead of printing troupe.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "troupe", &mut script);
    crate::console::out(&String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}

pub fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let command = Cli::command();
    let Some(dir) = args.dir else {
        crate::console::out(&render(clap_mangen::Man::new(command))?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let mut pages = vec![(
        "troupe.1".to_string(),
        clap_mangen::Man::new(command.clone()),
    )];
    for sub in command.get_subcommands() {
        let name = format!("troupe-{}", sub.get_name());
        let page = clap_mangen::Man::new(sub.clone().name(name.clone()));
        pages.push((format!("{name}.1"), page));
    }
    for (file, page) in pages {
        let path = dir.join(&file);
        std::fs::write(&path, render(page)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        crate::say!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn render(page: clap_mangen::Man) -> anyhow::Result<String> {
    let mut roff = Vec::new();
    page.render(&mut roff)
        .context("cannot render the manual page")?;
    Ok(String::from_utf8_lossy(&roff).into_owned())
}
